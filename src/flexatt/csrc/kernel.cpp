// The decoding kernel: forced decoding (inference, float32, CPU) of the Bahdanau-style decoder of
// flexatt.decoders with the concat score: global attention, or flexible attention (2017
// eqs. 4-8 and the vision span of section 3.1). Built on first use by flexatt/decoding/kernel.py;
// the eager backend (flexatt.decoding.eager) is the reference it is tested against.
//
// One call decodes a whole batch, its rows longest first (the rows still running at step t are
// a prefix, and the products cover just them). Per step t, for every sentence b still inside
// its reference:
//   [q_t; gh_t] = [2 W_q; W_gh] h_{t-1}                one matrix product for the batch
//   g_t = sigmoid(v_g . tanh(gh_t + gi_t) + b_g)       (2017 eq. 8; gi_t = W_ge i_t, looked up)
//   span [lo, hi] of the positions with penalty < tau  (2017 sec. 3.1; [1, S_b] when dense)
//   e_s = v_a . tanh((q_t + k_s) / 2), s in the span    (2017 eq. 3; k_s = 2 U_k hbar_s, precomputed;
//                                                        both halves doubled as flexatt.attention's
//                                                        ConcatScore keeps them)
//   a_t = softmax_s(e_s - g_t (s - p_{t-1})^2 / (2 sigma^2))     (eqs. 5-7)
//   c_t = sum_s a_t(s) hbar_s,  p_t = sum_s a_t(s) s              (eqs. 1 and 4)
//   h_t, cell_t = LSTM([i_t; c_t], h_{t-1})             (gates: W_ie i_t + b looked up,
//                                                         + [W_ic W_hh] [c_t; h_{t-1}], one product;
//                                                         a few rows: W_hh h_{t-1} + the span's
//                                                         sum of a_t(s) W_ic hbar_s)
// The readout, which does not feed back, is left to the caller (one product over all steps,
// with linear()). The window count of a step is the number of positions the score loop
// evaluated. bilstm() is the encoder's LSTM; every matrix product is product() below.
//
// Greedy and beam search (flexatt.decoding.kernel.KernelStepper) take one step at a time, since the
// next token depends on the readout: decode_step() runs the attention of any N rows (each
// reading its sentence's keys) and the LSTM, with the same attend_row() as forced decoding, and
// beam_candidates() picks each sentence's best candidates from the logits.

#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <limits>
#include <vector>

namespace {

using Vec = at::vec::Vectorized<float>;
constexpr int64_t VL = Vec::size();
constexpr int kAllLanes = (1 << VL) - 1;  // zero_mask() of a vector of zeros

inline float hsum(const Vec& v) {
  float buf[VL];
  v.store(buf);
  float s = 0.f;
  for (int64_t i = 0; i < VL; ++i) s += buf[i];
  return s;
}

inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

// sum_a v[a] * sigmoid(q[a] + k[a]); v . tanh((q + k) / 2) = 2 * this - sum(v)
inline float additive_half(const float* q, const float* k, const float* v, int64_t A) {
  const Vec one(1.f);
  Vec acc(0.f);
  int64_t a = 0;
  for (; a + VL <= A; a += VL) {
    Vec x = Vec::loadu(q + a) + Vec::loadu(k + a);
    acc = at::vec::fmadd(Vec::loadu(v + a), one / (one + x.neg().exp()), acc);
  }
  float r = hsum(acc);
  for (; a < A; ++a) r += v[a] * sigmoid(q[a] + k[a]);
  return r;
}

// sum_a v[a] * tanh(x[a] + y[a])
inline float tanh_dot(const float* x, const float* y, const float* v, int64_t n) {
  Vec acc(0.f);
  int64_t a = 0;
  for (; a + VL <= n; a += VL)
    acc = at::vec::fmadd(Vec::loadu(v + a), (Vec::loadu(x + a) + Vec::loadu(y + a)).tanh(), acc);
  float r = hsum(acc);
  for (; a < n; ++a) r += v[a] * std::tanh(x[a] + y[a]);
  return r;
}

// out += w * x over n floats
inline void axpy(float w, const float* x, float* out, int64_t n) {
  const Vec wv(w);
  int64_t j = 0;
  for (; j + VL <= n; j += VL) at::vec::fmadd(wv, Vec::loadu(x + j), Vec::loadu(out + j)).store(out + j);
  for (; j < n; ++j) out[j] += w * x[j];
}

// ---- matrix products with packed weights -------------------------------------------------------
// A weight matrix W (K x N, row-major) is stored as panels of kPanel columns, panels x K x kPanel
// (pack(); the columns past N are zeros), so a block of kRowBlock rows streams through one
// panel's K x kPanel floats in order while its kRowBlock x kPanelVecs accumulators stay in
// registers. Every output element is init + a_0 w_0 + a_1 w_1 + ... + a_{K-1} w_{K-1}, one fused
// multiply-add after the other in that order, whatever the number of rows, the blocking or the
// threads: a row's result does not depend on the batch it is in. (On this kind of problem, tens
// of rows against a few hundred columns, the library's GEMM reaches a fraction of the CPU's
// vector throughput; benchmarks/product_speed.py times both.)
constexpr int kPanelVecs = 4;
constexpr int64_t kPanel = kPanelVecs * VL;
constexpr int kRowBlock = 6;

struct Panels {  // a packed K x N matrix (or rows [k0, k0 + K) of one: rows())
  const float* data;
  int64_t K, N, stride;  // stride: floats from one panel to the next
  int64_t count() const { return (N + kPanel - 1) / kPanel; }
  Panels rows(int64_t k0, int64_t k) const { return {data + k0 * kPanel, k, N, stride}; }
};

// rows [row0, row0 + MR) of C's columns [col0, col0 + cols) (cols <= kPanel): init(r) + A_r W_panel,
// init(r) the init row of row r (nullptr: zeros), indexed from column 0
template <int MR, typename Init>
inline void block(const float* A, int64_t lda, const float* panel, int64_t K, const Init& init, int64_t row0,
                  int64_t col0, int64_t cols, float* C, int64_t ldc) {
  Vec acc[MR][kPanelVecs];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    const float* in = init(row0 + r);
#pragma GCC unroll 4
    for (int v = 0; v < kPanelVecs; ++v) {
      const int64_t n = std::min<int64_t>(VL, cols - v * VL);
      acc[r][v] = !in || n <= 0 ? Vec(0.f) : n == VL ? Vec::loadu(in + col0 + v * VL) : Vec::loadu(in + col0 + v * VL, n);
    }
  }
  const float* a = A + row0 * lda;
  for (int64_t k = 0; k < K; ++k) {
    Vec w[kPanelVecs];
#pragma GCC unroll 4
    for (int v = 0; v < kPanelVecs; ++v) w[v] = Vec::loadu(panel + k * kPanel + v * VL);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const Vec x(a[r * lda + k]);
#pragma GCC unroll 4
      for (int v = 0; v < kPanelVecs; ++v) acc[r][v] = at::vec::fmadd(x, w[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    float* out = C + (row0 + r) * ldc + col0;
#pragma GCC unroll 4
    for (int v = 0; v < kPanelVecs; ++v) {
      const int64_t n = std::min<int64_t>(VL, cols - v * VL);
      if (n == VL) acc[r][v].store(out + v * VL);
      else if (n > 0) acc[r][v].store(out + v * VL, static_cast<int>(n));
    }
  }
}

// C[0:M, 0:N] = init + A[0:M, 0:K] W: tiles of (panel, rows) split between the threads (inside a
// parallel region, as in bilstm's directions, on the calling thread alone)
template <typename Init>
void product(const float* A, int64_t lda, const Panels& W, const Init& init, float* C, int64_t ldc, int64_t M) {
  if (M <= 0) return;
  const int64_t panels = W.count();
  const int64_t chunk = M <= 24 * kRowBlock ? M : 16 * kRowBlock;
  const int64_t chunks = (M + chunk - 1) / chunk;
  at::parallel_for(0, panels * chunks, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t p = i / chunks, m0 = (i % chunks) * chunk, m1 = std::min(M, m0 + chunk);
      const int64_t col0 = p * kPanel, cols = std::min(kPanel, W.N - col0);
      const float* panel = W.data + p * W.stride;
      int64_t m = m0;
      for (; m + kRowBlock <= m1; m += kRowBlock) block<kRowBlock>(A, lda, panel, W.K, init, m, col0, cols, C, ldc);
      switch (m1 - m) {
        case 5: block<5>(A, lda, panel, W.K, init, m, col0, cols, C, ldc); break;
        case 4: block<4>(A, lda, panel, W.K, init, m, col0, cols, C, ldc); break;
        case 3: block<3>(A, lda, panel, W.K, init, m, col0, cols, C, ldc); break;
        case 2: block<2>(A, lda, panel, W.K, init, m, col0, cols, C, ldc); break;
        case 1: block<1>(A, lda, panel, W.K, init, m, col0, cols, C, ldc); break;
        default: break;
      }
    }
  });
}

inline const float* no_init(int64_t) { return nullptr; }

// the LSTM cell of torch.nn.LSTMCell from its pre-activations (gates i, f, g, o of H each)
inline void lstm_cell(const float* gates, float* cell, float* h_out, float* h_copy, int64_t H) {
  const Vec one(1.f);
  int64_t j = 0;
  for (; j + VL <= H; j += VL) {
    Vec i = one / (one + (-Vec::loadu(gates + j)).exp());
    Vec f = one / (one + (-Vec::loadu(gates + H + j)).exp());
    Vec g = Vec::loadu(gates + 2 * H + j).tanh();
    Vec o = one / (one + (-Vec::loadu(gates + 3 * H + j)).exp());
    Vec c = f * Vec::loadu(cell + j) + i * g;
    c.store(cell + j);
    Vec h = o * c.tanh();
    h.store(h_out + j);
    h.store(h_copy + j);
  }
  for (; j < H; ++j) {
    float c = sigmoid(gates[H + j]) * cell[j] + sigmoid(gates[j]) * std::tanh(gates[2 * H + j]);
    cell[j] = c;
    h_out[j] = h_copy[j] = sigmoid(gates[3 * H + j]) * std::tanh(c);
  }
}

// the vision span (1-based, inclusive) of FlexibleAttention.vision_span in the same float32
// operations: radius sigma * sqrt(2 tau / max(g, tiny)), (p - r, p + r) intersected with [1, S],
// widened to the position nearest p
inline void vision_span(float p, float g, float sigma, double tau, int64_t length, int64_t* lo_out,
                        int64_t* hi_out) {
  const float radius = sigma * std::sqrt((1.f / std::max(g, FLT_MIN)) * static_cast<float>(2.0 * tau));
  const float len = static_cast<float>(length);
  float lo = std::floor(p - radius) + 1.f;
  float hi = std::ceil(p + radius) - 1.f;
  const float nearest = std::min(std::max(std::nearbyint(p), 1.f), len);
  lo = std::min(std::max(lo, 1.f), nearest);
  hi = std::max(std::min(hi, len), nearest);
  *lo_out = static_cast<int64_t>(lo);
  *hi_out = static_cast<int64_t>(hi);
}

// The attention of one decoding row, shared by forced decoding and the search step: the
// constants of a model (v_a and its sum, v_g, b_g, sigma) and of the threshold tau
struct Attend {
  const float* va;
  const float* vg;
  int64_t A, G, C;
  float va_sum, gb, sigma, two_sigma2;
  double tau;
  bool flexible, dense;
};

Attend make_attend(const float* va, const float* vg, int64_t A, int64_t G, int64_t C, double b_g, double sigma,
                   double tau, bool flexible) {
  float va_sum = 0.f;
  for (int64_t a = 0; a < A; ++a) va_sum += va[a];
  return {va, vg, A, G, C, va_sum, static_cast<float>(b_g), static_cast<float>(sigma),
          static_cast<float>(2.0 * sigma * sigma), tau, flexible, !flexible || std::isinf(tau)};
}

struct Span {
  int64_t lo, hi;  // the scored positions, 1-based inclusive (the window is hi - lo + 1)
  float p_t, g;
};

// One row's attention at one step (2017 paper): qg = [2 W_q h_{t-1} (A); W_gh h_{t-1} (G)], fed_g
// = W_ge i_t (G; flexible only), p = p_{t-1}, keys S x A (2 U_k hbar) and values S x C (hbar) of
// the row's sentence, length S_i. g_t = sigmoid(v_g . tanh(W_gh h + W_ge i) + b_g) (eq. 8); the
// vision span (section 3.1; [1, S_i] when dense); for each position of the span the concat score
// (eq. 3) minus the penalty g_t (s - p)^2 / (2 sigma^2) (eqs. 5-6), then the softmax over the span
// (eq. 7), c_t = sum_s a_t(s) hbar_s (eq. 1) and p_t = sum_s a_t(s) s (eq. 4). Global attention
// is the same loop with the span [1, S_i] and no penalty. Writes a_t into a_row[lo-1 .. hi-1]
// (nothing else) and c_t into ctx (C).
inline Span attend_row(const Attend& m, const float* qg, const float* fed_g, float p, const float* keys,
                       const float* values, int64_t length, float* a_row, float* ctx) {
  const int64_t A = m.A, C = m.C;
  float g = 0.f;
  int64_t lo = 1, hi = length;
  if (m.flexible) {  // 2017 eq. 8
    g = sigmoid(tanh_dot(qg + A, fed_g, m.vg, m.G) + m.gb);
    if (!m.dense) vision_span(p, g, m.sigma, m.tau, length, &lo, &hi);
  }
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t s = lo - 1; s < hi; ++s) {  // eq. 3 over the span only
    float e = 2.f * additive_half(qg, keys + s * A, m.va, A) - m.va_sum;
    if (m.flexible) {  // eqs. 5-6
      const float d = static_cast<float>(s + 1) - p;
      e -= g * (d * d / m.two_sigma2);
    }
    a_row[s] = e;
    top = std::max(top, e);
  }
  float z = 0.f;
  for (int64_t s = lo - 1; s < hi; ++s) z += (a_row[s] = std::exp(a_row[s] - top));
  const float inv = 1.f / z;
  std::fill(ctx, ctx + C, 0.f);
  float p_t = 0.f;
  for (int64_t s = lo - 1; s < hi; ++s) {  // eqs. 7, 1 and 4
    const float w = (a_row[s] *= inv);
    axpy(w, values + s * C, ctx, C);
    p_t += w * static_cast<float>(s + 1);
  }
  return {lo, hi, p_t, g};
}

void check(const torch::Tensor& t, const char* name, int64_t dim) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.dim() == dim, name, " must have ", dim, " dimensions, got ", t.dim());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

void check_f32(const torch::Tensor& t, const char* name, int64_t dim) {
  check(t, name, dim);
  TORCH_CHECK(t.scalar_type() == at::kFloat, name, " must be float32");
}

// a matrix packed by pack(), or a slice [:, k0:k1] of one (rows k0..k1-1 of W: the panels keep
// their stride)
Panels panels_of(const torch::Tensor& packed, int64_t n, const char* name) {
  TORCH_CHECK(packed.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(packed.dim() == 3, name, " must have 3 dimensions, got ", packed.dim());
  TORCH_CHECK(packed.scalar_type() == at::kFloat, name, " must be float32");
  TORCH_CHECK(packed.size(0) == (n + kPanel - 1) / kPanel && packed.size(2) == kPanel && packed.stride(2) == 1 &&
                  packed.stride(1) == kPanel,
              name, " must be a K x ", n, " matrix packed by pack()");
  return {packed.data_ptr<float>(), packed.size(1), n, packed.stride(0)};
}

// the shapes and weights forced_decode and decode_step share, checked against one another: the
// encoder's keys (B x S x A) and values (B x S x C), the source lengths (B, each in [1, S]), the
// per-token table (V x F), the gate and query products and the score vectors; H is the decoder's
// hidden size, G the strength's size (0 for global attention)
struct Shapes {
  int64_t B, S, A, C, H, G, V;
  Panels WX, WQG;
  const int64_t* len;
};

Shapes shapes_of(const torch::Tensor& keys, const torch::Tensor& values, const torch::Tensor& src_len, int64_t H,
                 const torch::Tensor& table, const torch::Tensor& w_x, const torch::Tensor& w_qg,
                 const torch::Tensor& v_a, const torch::Tensor& v_g, bool flexible) {
  check_f32(keys, "keys", 3);
  check_f32(values, "values", 3);
  check(src_len, "src_len", 1);
  TORCH_CHECK(src_len.scalar_type() == at::kLong, "src_len must be int64");
  check_f32(table, "table", 2);
  check_f32(v_a, "v_a", 1);
  if (flexible) check_f32(v_g, "v_g", 1);
  const int64_t B = keys.size(0), S = keys.size(1), A = keys.size(2), C = values.size(2);
  const int64_t G = flexible ? v_g.size(0) : 0;
  TORCH_CHECK(values.size(0) == B && values.size(1) == S, "values must be B x S x C");
  TORCH_CHECK(src_len.size(0) == B, "src_len must have B rows");
  TORCH_CHECK(table.size(1) >= 4 * H + G, "table must be V x (4H + G + ...)");
  const Panels WX = panels_of(w_x, 4 * H, "w_x");
  const Panels WQG = panels_of(w_qg, A + G, "w_qg");
  TORCH_CHECK(WX.K == C + H, "w_x must be (C + H) x 4H");
  TORCH_CHECK(WQG.K == H, "w_qg must be H x (A + G)");
  TORCH_CHECK(v_a.size(0) == A, "v_a must have A elements");
  const int64_t* len = src_len.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    TORCH_CHECK(len[b] >= 1 && len[b] <= S, "src_len[", b, "] = ", len[b], " is outside [1, ", S, "]");
  return {B, S, A, C, H, G, table.size(0), WX, WQG, len};
}

// token ids of the rows b < B, positions t < used[b], inside [0, V); the first one outside is named
void check_tokens(const torch::Tensor& tokens, const char* name, const int64_t* used, int64_t V) {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const int64_t* ids = tokens.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < used[b]; ++t)
      TORCH_CHECK(ids[b * T + t] >= 0 && ids[b * T + t] < V, name, "[", b, ", ", t, "] = ", ids[b * T + t],
                  " is outside the table's [0, ", V, ")");
}

// the rows in the order the kernels run them: longest first (stable), so that the rows still
// running at any step are a prefix and every product covers just them
std::vector<int64_t> longest_first(const int64_t* n, int64_t B) {
  std::vector<int64_t> order(B);
  for (int64_t b = 0; b < B; ++b) order[b] = b;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return n[a] > n[b]; });
  return order;
}

}  // namespace

// W (K x N, float32) as the products of this file take it: ceil(N / kPanel) x K x kPanel
torch::Tensor pack(torch::Tensor w) {
  check_f32(w, "w", 2);
  const int64_t K = w.size(0), N = w.size(1), P = (N + kPanel - 1) / kPanel;
  auto out = torch::zeros({P, K, kPanel}, w.options());
  const float* W = w.data_ptr<float>();
  float* O = out.data_ptr<float>();
  for (int64_t p = 0; p < P; ++p) {
    const int64_t j0 = p * kPanel, cols = std::min(kPanel, N - j0);
    for (int64_t k = 0; k < K; ++k) std::copy(W + k * N + j0, W + k * N + j0 + cols, O + (p * K + k) * kPanel);
  }
  return out;
}

// init + x W for x M x K, W packed (pack(); n its columns) and init n (a bias, every row) or
// M x n (unit column stride, any row stride) or empty (none)
torch::Tensor linear(torch::Tensor x, torch::Tensor packed, int64_t n, torch::Tensor init) {
  check_f32(x, "x", 2);
  const Panels W = panels_of(packed, n, "packed");
  TORCH_CHECK(x.size(1) == W.K, "linear: x has ", x.size(1), " columns, the packed matrix ", W.K, " rows");
  const int64_t M = x.size(0);
  auto out = torch::empty({M, n}, x.options());
  const float* X = x.data_ptr<float>();
  float* O = out.data_ptr<float>();
  if (init.numel() == 0) {
    product(X, W.K, W, no_init, O, n, M);
  } else {
    TORCH_CHECK(init.device().is_cpu() && init.scalar_type() == at::kFloat, "init must be float32 on the CPU");
    TORCH_CHECK((init.dim() == 1 && init.size(0) == n && init.stride(0) == 1) ||
                    (init.dim() == 2 && init.size(0) == M && init.size(1) == n && init.stride(1) == 1),
                "init must be n (", n, ") or M x n (", M, " x ", n, ") with unit column stride");
    const float* I = init.data_ptr<float>();
    const int64_t ld = init.dim() == 1 ? 0 : init.stride(0);
    product(X, W.K, W, [&](int64_t r) { return I + r * ld; }, O, n, M);
  }
  return out;
}

// log_softmax(x)[v] = (x[v] - top) - log_z for a row x of V logits: top = max(x), log_z =
// log(sum_v exp(x[v] - top))
inline void log_normaliser(const float* x, int64_t V, float* top_out, float* log_z_out) {
  float top = -std::numeric_limits<float>::infinity();
  int64_t v = 0;
  if (V >= VL) {
    Vec m = Vec::loadu(x);
    for (v = VL; v + VL <= V; v += VL) m = at::vec::maximum(m, Vec::loadu(x + v));
    float buf[VL];
    m.store(buf);
    for (int64_t i = 0; i < VL; ++i) top = std::max(top, buf[i]);
  }
  for (; v < V; ++v) top = std::max(top, x[v]);
  const Vec tv(top);
  Vec acc(0.f);
  for (v = 0; v + VL <= V; v += VL) acc = acc + (Vec::loadu(x + v) - tv).exp();
  float z = hsum(acc);
  for (; v < V; ++v) z += std::exp(x[v] - top);
  *top_out = top;
  *log_z_out = std::log(z);
}

// log_softmax(logits)[r, gold[r]] = x_r[gold_r] - max(x_r) - log(sum_v exp(x_rv - max(x_r))) for
// each row r of logits N x V: the log-softmax at the gold token only, without writing the N x V
// log-probabilities
torch::Tensor gold_log_probs(torch::Tensor logits, torch::Tensor gold) {
  check_f32(logits, "logits", 2);
  check(gold, "gold", 1);
  TORCH_CHECK(gold.scalar_type() == at::kLong && gold.size(0) == logits.size(0), "gold must be N (int64)");
  const int64_t N = logits.size(0), V = logits.size(1);
  const int64_t* G = gold.data_ptr<int64_t>();
  for (int64_t r = 0; r < N; ++r)
    TORCH_CHECK(G[r] >= 0 && G[r] < V, "gold[", r, "] = ", G[r], " is outside [0, ", V, ")");
  auto out = torch::empty({N}, logits.options());
  const float* X = logits.data_ptr<float>();
  float* O = out.data_ptr<float>();
  at::parallel_for(0, N, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = X + r * V;
      float top, log_z;
      log_normaliser(x, V, &top, &log_z);
      O[r] = (x[G[r]] - top) - log_z;
    }
  });
  return out;
}

// The candidates of one beam-search step. Sentence j's live hypotheses are rows starts[j] ..
// starts[j] + counts[j] - 1 of logits N x V (at most k of them), with log-probabilities score
// (N); a candidate is a row r and a token v, scored score[r] + log_softmax(logits[r])[v]. Returns
// for each sentence its n best candidates, best first (ties: the lower row, then the lower
// token): top_score n_act x n (-inf past the sentence's candidates) and top_index n_act x n,
// (r - starts[j]) * V + v, the index of flexatt.decoding.search.beam_search's n_act x k x V grid. One pass
// over each row after its normaliser; the N x V log-probabilities are not written.
std::vector<torch::Tensor> beam_candidates(torch::Tensor logits, torch::Tensor score, torch::Tensor starts,
                                           torch::Tensor counts, int64_t n) {
  check_f32(logits, "logits", 2);
  check_f32(score, "score", 1);
  check(starts, "starts", 1);
  check(counts, "counts", 1);
  TORCH_CHECK(starts.scalar_type() == at::kLong && counts.scalar_type() == at::kLong &&
                  starts.size(0) == counts.size(0),
              "starts and counts must be int64 of one length");
  TORCH_CHECK(n >= 1, "n must be >= 1");
  const int64_t N = logits.size(0), V = logits.size(1), J = starts.size(0);
  TORCH_CHECK(score.size(0) == N, "score must have N elements");
  const int64_t* ST = starts.data_ptr<int64_t>();
  const int64_t* CT = counts.data_ptr<int64_t>();
  for (int64_t j = 0; j < J; ++j)
    TORCH_CHECK(CT[j] >= 1 && ST[j] >= 0 && ST[j] + CT[j] <= N, "sentence ", j, ": rows [", ST[j], ", ",
                ST[j] + CT[j], ") are outside [0, ", N, ")");
  auto top_score = torch::full({J, n}, -std::numeric_limits<float>::infinity(), logits.options());
  auto top_index = torch::zeros({J, n}, starts.options());
  const float* X = logits.data_ptr<float>();
  const float* SC = score.data_ptr<float>();
  float* TS = top_score.data_ptr<float>();
  int64_t* TI = top_index.data_ptr<int64_t>();
  at::parallel_for(0, J, 1, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      float* best = TS + j * n;  // sorted, best first; the first m are set
      int64_t* where = TI + j * n;
      int64_t m = 0;
      auto insert = [&](float c, int64_t index) {  // c beats best[n - 1] (or m < n)
        int64_t pos = std::min(m, n - 1);
        while (pos > 0 && best[pos - 1] < c) {
          best[pos] = best[pos - 1];
          where[pos] = where[pos - 1];
          --pos;
        }
        best[pos] = c;
        where[pos] = index;
        m = std::min(m + 1, n);
      };
      for (int64_t slot = 0; slot < CT[j]; ++slot) {
        const int64_t r = ST[j] + slot;
        const float* x = X + r * V;
        float top, log_z;
        log_normaliser(x, V, &top, &log_z);
        const float sc = SC[r];
        const Vec tv(top), zv(log_z), sv(sc);
        int64_t v = 0;
        for (; v + VL <= V; v += VL) {
          const float bar = m < n ? -std::numeric_limits<float>::infinity() : best[n - 1];
          const Vec c = ((Vec::loadu(x + v) - tv) - zv) + sv;
          if ((c > Vec(bar)).zero_mask() == kAllLanes) continue;  // no lane beats the bar
          float buf[VL];
          c.store(buf);
          for (int64_t i = 0; i < VL; ++i)
            if (m < n || buf[i] > best[n - 1]) insert(buf[i], slot * V + v + i);
        }
        for (; v < V; ++v) {
          const float c = ((x[v] - top) - log_z) + sc;
          if (m < n || c > best[n - 1]) insert(c, slot * V + v);
        }
      }
    }
  });
  return {top_score, top_index};
}

// keys B x S x A (2 U_k hbar), values B x S x C (hbar), src_len B (long), steps B (long: forced
// steps per sentence), hidden / cell B x H (the state before step 1), tokens B x T' (long, T' >=
// every steps[b]: the fed-back tokens, row b step t at [b, t]), table V x F (per token, the terms
// of its embedding i: [W_ie i + b_ih + b_hh (4H); g_t's W_ge i (G; flexible only); anything after
// is ignored]), w_x ([W_ic W_hh] transposed, (C + H) x 4H) and w_qg ([2 W_q; W_gh] transposed, H x
// (A + G); G = 0 for global) packed by pack(), v_a A, v_g G, b_g, sigma, tau (inf: dense),
// flexible, ctx_gates B x S x 4H (hbar W_icT: the context's gate share as a sum over the span)
// or empty (one product for it), timed (also measure the phases).
// The rows run longest first (the products cover only the rows still running). Returns hc N x
// (H + C) ([h_t; c_t] of the N = sum(steps) decoded steps, step-major: the readout's input),
// rows_b / rows_t N (long: the sentence and the step of each), attention B x T x S (a_t, zeros
// outside the span and past the end; T = max steps), window / span_lo / span_hi B x T (long),
// position B x T (p_t), g B x T (g_t; zeros for global) and, if timed, the seconds spent in the
// attention and in the LSTM (float64 [2]; zeros otherwise).
std::vector<torch::Tensor> forced_decode(torch::Tensor keys, torch::Tensor values, torch::Tensor src_len,
                                         torch::Tensor steps, torch::Tensor hidden, torch::Tensor cell,
                                         torch::Tensor tokens, torch::Tensor table, torch::Tensor w_x,
                                         torch::Tensor w_qg, torch::Tensor v_a, torch::Tensor v_g, double b_g,
                                         double sigma, double tau, bool flexible, torch::Tensor ctx_gates,
                                         bool timed) {
  check_f32(hidden, "hidden", 2);
  const Shapes sh = shapes_of(keys, values, src_len, hidden.size(1), table, w_x, w_qg, v_a, v_g, flexible);
  const int64_t B = sh.B, S = sh.S, A = sh.A, C = sh.C, H = sh.H, G = sh.G, F = table.size(1);
  const Panels &WX = sh.WX, &WQG = sh.WQG;
  const int64_t* len = sh.len;
  check(steps, "steps", 1);
  check_f32(cell, "cell", 2);
  check(tokens, "tokens", 2);
  TORCH_CHECK(steps.scalar_type() == at::kLong && tokens.scalar_type() == at::kLong,
              "steps and tokens must be int64");
  TORCH_CHECK(steps.size(0) == B && hidden.size(0) == B && cell.size(0) == B && cell.size(1) == H &&
                  tokens.size(0) == B,
              "steps, hidden, cell and tokens must have B rows");
  const int64_t* n_steps = steps.data_ptr<int64_t>();
  int64_t T = 0, N = 0;
  for (int64_t b = 0; b < B; ++b) {
    TORCH_CHECK(n_steps[b] >= 0 && n_steps[b] <= tokens.size(1), "steps[", b, "] = ", n_steps[b],
                " is outside [0, ", tokens.size(1), "]");
    T = std::max(T, n_steps[b]);
    N += n_steps[b];
  }
  check_tokens(tokens, "tokens", n_steps, sh.V);
  // given ctx_gates = hbar W_icT (B x S x 4H), the context's share of the gates is W_ic c_t =
  // sum_s a_t(s) (W_ic hbar_s) over the span only (the caller gives it for a few rows)
  const bool span_sum = ctx_gates.numel() > 0;
  if (span_sum) {
    check_f32(ctx_gates, "ctx_gates", 3);
    TORCH_CHECK(ctx_gates.size(0) == B && ctx_gates.size(1) == S && ctx_gates.size(2) == 4 * H,
                "ctx_gates must be B x S x 4H or empty");
  }

  // row r of the buffers below is sentence order[r]; the rows of step t are [0, running(t))
  const std::vector<int64_t> order = longest_first(n_steps, B);
  auto opts = keys.options();
  auto hc = torch::empty({N, H + C}, opts);
  auto rows_b = torch::empty({N}, src_len.options());
  auto rows_t = torch::empty({N}, src_len.options());
  auto attention = torch::zeros({B, T, S}, opts);
  auto position = torch::zeros({B, T}, opts);
  auto g_out = torch::zeros({B, T}, opts);
  auto window = torch::zeros({B, T}, src_len.options());
  auto span_lo = torch::zeros({B, T}, src_len.options());
  auto span_hi = torch::zeros({B, T}, src_len.options());
  // x = [c_t; h_{t-1}] per row: the input of the gate product; its h half is the query
  std::vector<float> x(B * (C + H)), cells(B * H), qg(B * (A + G)), gates(B * 4 * H), prev_pos(B, 1.f);  // p_0 = 1
  float* X = x.data();
  float* CELL = cells.data();
  float* QG = qg.data();
  float* GATES = gates.data();
  float* P = prev_pos.data();
  for (int64_t r = 0; r < B; ++r) {
    std::copy_n(hidden.data_ptr<float>() + order[r] * H, H, X + r * (C + H) + C);
    std::copy_n(cell.data_ptr<float>() + order[r] * H, H, CELL + r * H);
  }

  const float* K = keys.data_ptr<float>();
  const float* V = values.data_ptr<float>();
  const float* va = v_a.data_ptr<float>();
  const float* vg = flexible ? v_g.data_ptr<float>() : nullptr;
  const float* TABLE = table.data_ptr<float>();
  const int64_t* TOK = tokens.data_ptr<int64_t>();
  const int64_t t_stride = tokens.size(1);
  float* HC = hc.data_ptr<float>();
  int64_t* RB = rows_b.data_ptr<int64_t>();
  int64_t* RT = rows_t.data_ptr<int64_t>();
  float* ATT = attention.data_ptr<float>();
  float* POS = position.data_ptr<float>();
  float* GOUT = g_out.data_ptr<float>();
  int64_t* WIN = window.data_ptr<int64_t>();
  int64_t* LO = span_lo.data_ptr<int64_t>();
  int64_t* HI = span_hi.data_ptr<int64_t>();
  const Attend att = make_attend(va, vg, A, G, C, b_g, sigma, tau, flexible);
  const float* PG = span_sum ? ctx_gates.data_ptr<float>() : nullptr;

  // timed: seconds spent in the attention (the query products W_q h and W_gh h, g_t, the span,
  // the scores, the softmax, c_t and p_t) and in the LSTM (its products and the cell)
  using Clock = std::chrono::steady_clock;
  double attention_s = 0.0, lstm_s = 0.0;
  Clock::time_point mark;
  auto lap = [&](double& into) {
    if (!timed) return;
    const auto now = Clock::now();
    into += std::chrono::duration<double>(now - mark).count();
    mark = now;
  };
  if (timed) mark = Clock::now();

  int64_t running = B, done = 0;  // rows of this step; hc rows of the steps before
  for (int64_t t = 0; t < T; ++t) {
    while (running > 0 && n_steps[order[running - 1]] <= t) --running;
    // the fed-back token's table row of row r
    auto fed = [&](int64_t r) { return TABLE + TOK[order[r] * t_stride + t] * F; };
    product(X + C, C + H, WQG, no_init, QG, A + G, running);  // running x (A + G)
    at::parallel_for(0, running, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = order[r];
        float* ctx = X + r * (C + H);
        const Span sp = attend_row(att, QG + r * (A + G), fed(r) + 4 * H, P[r], K + b * S * A, V + b * S * C,
                                   len[b], ATT + (b * T + t) * S, ctx);
        std::copy(ctx, ctx + C, HC + (done + r) * (H + C) + H);
        RB[done + r] = b;
        RT[done + r] = t;
        P[r] = sp.p_t;
        POS[b * T + t] = sp.p_t;
        GOUT[b * T + t] = sp.g;
        WIN[b * T + t] = sp.hi - sp.lo + 1;
        LO[b * T + t] = sp.lo;
        HI[b * T + t] = sp.hi;
      }
    });
    lap(attention_s);
    // running x 4H: W_ie i_t + b (looked up) + W_ic c_t + W_hh h_{t-1}
    if (span_sum) {
      product(X + C, C + H, WX.rows(C, H), fed, GATES, 4 * H, running);
      for (int64_t r = 0; r < running; ++r) {
        const int64_t b = order[r];
        const float* a_row = ATT + (b * T + t) * S;
        for (int64_t s = LO[b * T + t] - 1; s < HI[b * T + t]; ++s)
          axpy(a_row[s], PG + (b * S + s) * 4 * H, GATES + r * 4 * H, 4 * H);
      }
    } else {
      product(X, C + H, WX, fed, GATES, 4 * H, running);
    }
    at::parallel_for(0, running, 8, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        lstm_cell(GATES + r * 4 * H, CELL + r * H, X + r * (C + H) + C, HC + (done + r) * (H + C), H);
    });
    done += running;
    lap(lstm_s);
  }
  auto phases = torch::tensor({attention_s, lstm_s}, torch::kFloat64);
  return {hc, rows_b, rows_t, attention, window, span_lo, span_hi, position, g_out, phases};
}

// One decoding step of greedy and beam search, N rows at once: row r is a hypothesis of sentence
// sent[r] of the batch (keys B x S x A, values B x S x C, src_len B: the encoder side, once per
// sentence however many rows read it), with h_{t-1} hidden[r], the LSTM cell cell[r], p_{t-1}
// position[r] and the fed-back token tokens[r] (long). table, w_x, w_qg, v_a, v_g, b_g, sigma,
// tau and flexible as in forced_decode: each row takes the very attention of a forced step
// (attend_row), then the LSTM. Returns hc N x (H + C) ([h_t; c_t]: the readout's input and the
// next step's h), the new cell N x H, the weights N x S (a_t; zeros outside the span) and per
// row window, span_lo, span_hi (long), p_t and g_t (zeros for global).
std::vector<torch::Tensor> decode_step(torch::Tensor keys, torch::Tensor values, torch::Tensor src_len,
                                       torch::Tensor sent, torch::Tensor hidden, torch::Tensor cell,
                                       torch::Tensor position, torch::Tensor tokens, torch::Tensor table,
                                       torch::Tensor w_x, torch::Tensor w_qg, torch::Tensor v_a, torch::Tensor v_g,
                                       double b_g, double sigma, double tau, bool flexible) {
  // hidden may be a view of the previous step's hc (rows of unit column stride)
  TORCH_CHECK(hidden.device().is_cpu() && hidden.dim() == 2 && hidden.scalar_type() == at::kFloat &&
                  hidden.stride(1) == 1,
              "hidden must be a 2-dimensional float32 CPU tensor with unit column stride");
  const Shapes sh = shapes_of(keys, values, src_len, hidden.size(1), table, w_x, w_qg, v_a, v_g, flexible);
  const int64_t B = sh.B, S = sh.S, A = sh.A, C = sh.C, H = sh.H, G = sh.G, F = table.size(1);
  const Panels &WX = sh.WX, &WQG = sh.WQG;
  const int64_t* len = sh.len;
  check(sent, "sent", 1);
  check_f32(cell, "cell", 2);
  check_f32(position, "position", 1);
  check(tokens, "tokens", 1);
  TORCH_CHECK(sent.scalar_type() == at::kLong && tokens.scalar_type() == at::kLong, "sent and tokens must be int64");
  const int64_t N = sent.size(0);
  TORCH_CHECK(hidden.size(0) == N && cell.size(0) == N && cell.size(1) == H && position.size(0) == N &&
                  tokens.size(0) == N,
              "hidden, cell, position and tokens must have N rows");
  const int64_t* SENT = sent.data_ptr<int64_t>();
  const int64_t* TOK = tokens.data_ptr<int64_t>();
  for (int64_t r = 0; r < N; ++r) {
    TORCH_CHECK(SENT[r] >= 0 && SENT[r] < B, "sent[", r, "] = ", SENT[r], " is outside [0, ", B, ")");
    TORCH_CHECK(TOK[r] >= 0 && TOK[r] < sh.V, "tokens[", r, "] = ", TOK[r], " is outside [0, ", sh.V, ")");
  }

  auto opts = keys.options();
  auto hc = torch::empty({N, H + C}, opts);
  auto cell_out = cell.clone();
  auto weights = torch::zeros({N, S}, opts);
  auto window = torch::empty({N}, src_len.options());
  auto span_lo = torch::empty({N}, src_len.options());
  auto span_hi = torch::empty({N}, src_len.options());
  auto p_out = torch::empty({N}, opts);
  auto g_out = torch::zeros({N}, opts);
  // x = [c_t; h_{t-1}] per row: the input of the gate product; its h half is the query
  std::vector<float> x(N * (C + H)), qg(N * (A + G)), gates(N * 4 * H);
  float* X = x.data();
  float* QG = qg.data();
  float* GATES = gates.data();
  const float* HID = hidden.data_ptr<float>();
  const int64_t h_stride = hidden.stride(0);
  for (int64_t r = 0; r < N; ++r) std::copy_n(HID + r * h_stride, H, X + r * (C + H) + C);

  const float* K = keys.data_ptr<float>();
  const float* V = values.data_ptr<float>();
  const float* TABLE = table.data_ptr<float>();
  const float* P = position.data_ptr<float>();
  float* HC = hc.data_ptr<float>();
  float* W = weights.data_ptr<float>();
  int64_t* WIN = window.data_ptr<int64_t>();
  int64_t* LO = span_lo.data_ptr<int64_t>();
  int64_t* HI = span_hi.data_ptr<int64_t>();
  float* POS = p_out.data_ptr<float>();
  float* GOUT = g_out.data_ptr<float>();
  const Attend att = make_attend(v_a.data_ptr<float>(), flexible ? v_g.data_ptr<float>() : nullptr, A, G, C, b_g,
                                 sigma, tau, flexible);
  auto fed = [&](int64_t r) { return TABLE + TOK[r] * F; };

  product(X + C, C + H, WQG, no_init, QG, A + G, N);  // N x (A + G)
  at::parallel_for(0, N, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = SENT[r];
      const Span sp = attend_row(att, QG + r * (A + G), fed(r) + 4 * H, P[r], K + b * S * A, V + b * S * C, len[b],
                                 W + r * S, X + r * (C + H));
      std::copy_n(X + r * (C + H), C, HC + r * (H + C) + H);
      POS[r] = sp.p_t;
      GOUT[r] = sp.g;
      WIN[r] = sp.hi - sp.lo + 1;
      LO[r] = sp.lo;
      HI[r] = sp.hi;
    }
  });
  // N x 4H: W_ie i_t + b (looked up) + W_ic c_t + W_hh h_{t-1}, then the cell
  product(X, C + H, WX, fed, GATES, 4 * H, N);
  float* CELL = cell_out.data_ptr<float>();
  at::parallel_for(0, N, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      lstm_cell(GATES + r * 4 * H, CELL + r * H, HC + r * (H + C), HC + r * (H + C), H);
  });
  return {hc, cell_out, weights, window, span_lo, span_hi, p_out, g_out};
}

// The encoder's bidirectional LSTM (torch.nn.LSTM, one layer, batch_first) over the real
// positions of each row, the two directions on two threads at once. src B x S (long: token ids),
// src_len B, table V x 8H (per token x, its input projections [W_ih_fwd x + b_fwd (4H);
// W_ih_bwd x + b_bwd (4H)]), w_hh_fwd / w_hh_bwd (W_hh transposed, H x 4H) packed by pack().
// Returns the states B x S x 2H ([forward; backward], zeros at padding): the forward direction
// runs s = 1..S_b, the backward one s = S_b..1, each from a zero state. The rows run longest
// first, so that the rows at a position are a prefix and the product covers just them.
torch::Tensor bilstm(torch::Tensor src, torch::Tensor src_len, torch::Tensor table, torch::Tensor w_hh_fwd,
                     torch::Tensor w_hh_bwd) {
  check(src, "src", 2);
  check(src_len, "src_len", 1);
  check_f32(table, "table", 2);
  TORCH_CHECK(src.scalar_type() == at::kLong && src_len.scalar_type() == at::kLong, "src and src_len must be int64");
  const int64_t B = src.size(0), S = src.size(1), H = table.size(1) / 8;
  TORCH_CHECK(table.size(1) == 8 * H && H > 0, "bilstm: table must be V x 8H");
  TORCH_CHECK(src_len.size(0) == B, "bilstm: src_len must have B elements");
  const Panels fwd = panels_of(w_hh_fwd, 4 * H, "w_hh_fwd"), bwd = panels_of(w_hh_bwd, 4 * H, "w_hh_bwd");
  TORCH_CHECK(fwd.K == H && bwd.K == H, "bilstm: w_hh_fwd and w_hh_bwd must be H x 4H");
  const int64_t* len = src_len.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    TORCH_CHECK(len[b] >= 1 && len[b] <= S, "src_len[", b, "] = ", len[b], " is outside [1, ", S, "]");
  check_tokens(src, "src", len, table.size(0));
  const std::vector<int64_t> order = longest_first(len, B);
  auto states = torch::zeros({B, S, 2 * H}, table.options());
  const float* TABLE = table.data_ptr<float>();
  const int64_t* SRC = src.data_ptr<int64_t>();
  float* OUT = states.data_ptr<float>();
  at::parallel_for(0, 2, 1, [&](int64_t d0, int64_t d1) {
    for (int64_t d = d0; d < d1; ++d) {
      const Panels& w_hh = d == 0 ? fwd : bwd;
      std::vector<float> h(B * H, 0.f), c(B * H, 0.f), gates(B * 4 * H);
      int64_t running = d == 0 ? B : 0;  // rows with S_b > s: a prefix of order
      for (int64_t step = 0; step < S; ++step) {
        const int64_t s = d == 0 ? step : S - 1 - step;
        if (d == 0)
          while (running > 0 && len[order[running - 1]] <= s) --running;
        else
          while (running < B && len[order[running]] > s) ++running;
        auto projected = [&](int64_t r) { return TABLE + SRC[order[r] * S + s] * 8 * H + d * 4 * H; };
        product(h.data(), H, w_hh, projected, gates.data(), 4 * H, running);
        for (int64_t r = 0; r < running; ++r)
          lstm_cell(gates.data() + r * 4 * H, c.data() + r * H, h.data() + r * H,
                    OUT + (order[r] * S + s) * 2 * H + d * H, H);
      }
    }
  });
  return states;
}

// The vision span of the kernel's decoding loop for given p_{t-1}, g_t and S (float32, float32,
// int64 tensors of one shape): 1-based inclusive bounds, for the tests against
// FlexibleAttention.vision_span.
std::vector<torch::Tensor> vision_spans(torch::Tensor prev, torch::Tensor g, double sigma, double tau,
                                        torch::Tensor lengths) {
  check_f32(prev, "prev", 1);
  check_f32(g, "g", 1);
  check(lengths, "lengths", 1);
  TORCH_CHECK(lengths.scalar_type() == at::kLong && g.size(0) == prev.size(0) && lengths.size(0) == prev.size(0),
              "vision_spans: prev, g (float32) and lengths (int64) of one length");
  auto lo = torch::empty_like(lengths), hi = torch::empty_like(lengths);
  const float *P = prev.data_ptr<float>(), *G = g.data_ptr<float>();
  const int64_t* L = lengths.data_ptr<int64_t>();
  for (int64_t i = 0; i < prev.size(0); ++i)
    vision_span(P[i], G[i], static_cast<float>(sigma), tau, L[i], lo.data_ptr<int64_t>() + i, hi.data_ptr<int64_t>() + i);
  return {lo, hi};
}

int vector_width() { return static_cast<int>(VL); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forced_decode", &forced_decode, "forced decoding of a batch (see the file's header)");
  m.def("decode_step", &decode_step, "one step of greedy or beam search on N rows (see decode_step)");
  m.def("beam_candidates", &beam_candidates, "the n best candidates of each sentence of a beam-search step");
  m.def("pack", &pack, "a K x N weight matrix as this file's products take it");
  m.def("linear", &linear, "init + x W with W packed by pack()");
  m.def("gold_log_probs", &gold_log_probs, "the log-softmax of each row at its gold token");
  m.def("bilstm", &bilstm, "the encoder's bidirectional LSTM over the real positions of each row");
  m.def("vision_spans", &vision_spans, "the kernel's vision span for given p, g and S (for tests)");
  m.def("vector_width", &vector_width, "floats per SIMD vector this build uses");
}
