// Fused forced decoding (inference, float32, CPU) of the Bahdanau-style decoder of
// flexatt.decoders with the concat score: global attention, or flexible attention (2017
// eqs. 4-8 and the vision span of section 3.1). Built on first use by flexatt/fused.py;
// flexatt.search.forced_decode is the eager reference it is tested against.
//
// One call decodes a whole batch. Per step t, for every sentence b still inside its reference:
//   [q_t; gh_t] = [W_q; W_gh] h_{t-1}                  one matrix product for the batch
//   g_t = sigmoid(v_g . tanh(gh_t + gi_t) + b_g)       (2017 eq. 8; gi_t = W_ge i_t, looked up)
//   span [lo, hi] of the positions with penalty < tau  (2017 sec. 3.1; [1, S_b] when dense)
//   e_s = v_a . tanh(q_t + k_s),  s in the span only   (2017 eq. 3; k_s = U_k hbar_s, precomputed)
//   a_t = softmax_s(e_s - g_t (s - p_{t-1})^2 / (2 sigma^2))     (eqs. 5-7)
//   c_t = sum_s a_t(s) hbar_s,  p_t = sum_s a_t(s) s              (eqs. 1 and 4)
//   h_t, cell_t = LSTM([i_t; c_t], h_{t-1})             (gates: W_ie i_t + b looked up,
//                                                         + [W_ic W_hh] [c_t; h_{t-1}], one product;
//                                                         a few rows: W_hh h_{t-1} + the span's
//                                                         sum of a_t(s) W_ic hbar_s)
// The readout, which does not feed back, is left to the caller (one product over all steps).
// The window count of a step is the number of positions the score loop evaluated.

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
constexpr int64_t kSmallBatch = 4;

inline float hsum(const Vec& v) {
  float buf[VL];
  v.store(buf);
  float s = 0.f;
  for (int64_t i = 0; i < VL; ++i) s += buf[i];
  return s;
}

inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

// sum_a v[a] * sigmoid(2 (q[a] + k[a])); v . tanh(q + k) = 2 * this - sum(v)
inline float additive_half(const float* q, const float* k, const float* v, int64_t A) {
  const Vec one(1.f), minus_two(-2.f);
  Vec acc(0.f);
  int64_t a = 0;
  for (; a + VL <= A; a += VL) {
    Vec x = (Vec::loadu(q + a) + Vec::loadu(k + a)) * minus_two;
    acc = at::vec::fmadd(Vec::loadu(v + a), one / (one + x.exp()), acc);
  }
  float r = hsum(acc);
  for (; a < A; ++a) r += v[a] * sigmoid(2.f * (q[a] + k[a]));
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

// out[0:n] = (init ? init : 0) + sum_i x[i] * w[i, 0:n] for the columns [j0, j1) of w (row-major,
// m x ld): a matrix-vector product for one row (at batch sizes of a few rows a library GEMM call
// costs more than this)
inline void gemv_cols(const float* x, const float* w, const float* init, float* out, int64_t m, int64_t ld,
                      int64_t j0, int64_t j1) {
  w += j0; out += j0; if (init) init += j0;
  const int64_t n = j1 - j0;
  if (init) std::copy(init, init + n, out); else std::fill(out, out + n, 0.f);
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) {  // four rows of w per pass over out
    const Vec x0(x[i]), x1(x[i + 1]), x2(x[i + 2]), x3(x[i + 3]);
    const float *w0 = w + i * ld, *w1 = w0 + ld, *w2 = w1 + ld, *w3 = w2 + ld;
    int64_t j = 0;
    for (; j + VL <= n; j += VL) {
      Vec acc = Vec::loadu(out + j);
      acc = at::vec::fmadd(x0, Vec::loadu(w0 + j), acc);
      acc = at::vec::fmadd(x1, Vec::loadu(w1 + j), acc);
      acc = at::vec::fmadd(x2, Vec::loadu(w2 + j), acc);
      acc = at::vec::fmadd(x3, Vec::loadu(w3 + j), acc);
      acc.store(out + j);
    }
    for (; j < n; ++j) out[j] += x[i] * w0[j] + x[i + 1] * w1[j] + x[i + 2] * w2[j] + x[i + 3] * w3[j];
  }
  for (; i < m; ++i) axpy(x[i], w + i * ld, out, n);
}

// gemv_cols over all columns of the rows b < B with t < steps[b], the columns split between the
// threads (each thread then keeps its part of w in its own cache from step to step)
inline void gemv_batch(const float* x, int64_t ldx, const float* w, const float* init, int64_t ldi, float* out,
                       int64_t ldo, int64_t m, int64_t n, int64_t B, int64_t t, const int64_t* n_steps) {
  const int64_t chunks = std::min<int64_t>(at::get_num_threads(), std::max<int64_t>(1, n / (4 * VL)));
  const int64_t per = (n / chunks + VL - 1) / VL * VL;
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t j0 = c * per, j1 = std::min(n, j0 + per);
      for (int64_t b = 0; b < B; ++b)
        if (t < n_steps[b] && j0 < j1)
          gemv_cols(x + b * ldx, w, init ? init + b * ldi : nullptr, out + b * ldo, m, n, j0, j1);
    }
  });
}

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

void check(const torch::Tensor& t, const char* name, int64_t dim) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.dim() == dim, name, " must have ", dim, " dimensions, got ", t.dim());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

void check_f32(const torch::Tensor& t, const char* name, int64_t dim) {
  check(t, name, dim);
  TORCH_CHECK(t.scalar_type() == at::kFloat, name, " must be float32");
}

}  // namespace

// keys B x S x A (U_k hbar), values B x S x C (hbar), src_len B (long), steps B (long: forced
// steps per sentence), hidden / cell B x H (the state before step 1; cell is updated in place),
// feedback T x B x F: per step the terms of the fed-back token, [W_ie i_t + b_ih + b_hh (4H);
// g_t's W_ge i_t (G; flexible only); anything after is ignored], w_x (C + H) x 4H ([W_ic W_hh]
// transposed), w_qg H x (A + G) ([W_q; W_gh] transposed; G = 0 for global), v_a A, v_g G, b_g,
// sigma, tau (inf: dense), flexible, ctx_gates B x S x 4H (hbar W_icT; batches of up to
// kSmallBatch rows only, else unused), timed (also measure the phases).
// Returns hc T x B x (H + C) ([h_t; c_t]), attention B x T x S (a_t, zeros outside the span and
// past the end), window / span_lo / span_hi B x T (long), position B x T (p_t), g B x T (g_t;
// zeros for global) and, if timed, the seconds spent in the attention and in the LSTM (float64
// [2]; zeros otherwise).
std::vector<torch::Tensor> forced_decode(torch::Tensor keys, torch::Tensor values, torch::Tensor src_len,
                                         torch::Tensor steps, torch::Tensor hidden, torch::Tensor cell,
                                         torch::Tensor feedback, torch::Tensor w_x, torch::Tensor w_qg,
                                         torch::Tensor v_a, torch::Tensor v_g, double b_g,
                                         double sigma, double tau, bool flexible, torch::Tensor ctx_gates,
                                         bool timed) {
  check_f32(keys, "keys", 3);
  check_f32(values, "values", 3);
  check(src_len, "src_len", 1);
  check(steps, "steps", 1);
  check_f32(hidden, "hidden", 2);
  check_f32(cell, "cell", 2);
  check_f32(feedback, "feedback", 3);
  check_f32(w_x, "w_x", 2);
  check_f32(w_qg, "w_qg", 2);
  check_f32(v_a, "v_a", 1);
  TORCH_CHECK(src_len.scalar_type() == at::kLong && steps.scalar_type() == at::kLong,
              "src_len and steps must be int64");
  const int64_t B = keys.size(0), S = keys.size(1), A = keys.size(2), C = values.size(2);
  const int64_t H = hidden.size(1), T = feedback.size(0), G = flexible ? v_g.size(0) : 0;
  const int64_t F = feedback.size(2);
  TORCH_CHECK(values.size(0) == B && values.size(1) == S, "values must be B x S x C");
  TORCH_CHECK(src_len.size(0) == B && steps.size(0) == B && hidden.size(0) == B && cell.size(0) == B &&
                  cell.size(1) == H,
              "src_len, steps, hidden and cell must have B rows");
  TORCH_CHECK(feedback.size(1) == B && F >= 4 * H + G, "feedback must be T x B x (4H + G + ...)");
  TORCH_CHECK(w_x.size(0) == C + H && w_x.size(1) == 4 * H, "w_x must be (C + H) x 4H");
  TORCH_CHECK(w_qg.size(0) == H && w_qg.size(1) == A + G, "w_qg must be H x (A + G)");
  TORCH_CHECK(v_a.size(0) == A, "v_a must have A elements");
  if (flexible) check_f32(v_g, "v_g", 1);
  const int64_t* len = src_len.data_ptr<int64_t>();
  const int64_t* n_steps = steps.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    TORCH_CHECK(len[b] >= 1 && len[b] <= S, "src_len[", b, "] = ", len[b], " is outside [1, ", S, "]");
    TORCH_CHECK(n_steps[b] >= 0 && n_steps[b] <= T, "steps[", b, "] = ", n_steps[b], " is outside [0, ", T, "]");
  }
  const bool dense = !flexible || std::isinf(tau);
  // a few rows: the products of a step as matrix-vector loops here, not library calls, and the
  // context's share of the gates, W_ic c_t = sum_s a_t(s) (W_ic hbar_s), from the per-sentence
  // projection ctx_gates = hbar W_icT (B x S x 4H) over the span only
  const bool small = B <= kSmallBatch;
  if (small) {
    check_f32(ctx_gates, "ctx_gates", 3);
    TORCH_CHECK(ctx_gates.size(0) == B && ctx_gates.size(1) == S && ctx_gates.size(2) == 4 * H,
                "ctx_gates must be B x S x 4H for batches of up to ", kSmallBatch, " rows");
  }

  auto opts = keys.options();
  auto hc = torch::zeros({T, B, H + C}, opts);  // [h_t; c_t], the readout's input
  auto attention = torch::zeros({B, T, S}, opts);
  auto position = torch::zeros({B, T}, opts);
  auto g_out = torch::zeros({B, T}, opts);
  auto window = torch::zeros({B, T}, src_len.options());
  auto span_lo = torch::zeros({B, T}, src_len.options());
  auto span_hi = torch::zeros({B, T}, src_len.options());
  // x = [c_t; h_{t-1}] per row: the input of the one gate product; its h half is the query
  auto x = torch::zeros({B, C + H}, opts);
  x.narrow(1, C, H).copy_(hidden);
  auto h_prev = x.narrow(1, C, H);
  auto qg = torch::empty({B, A + G}, opts);
  auto gates = torch::empty({B, 4 * H}, opts);

  const float* K = keys.data_ptr<float>();
  const float* V = values.data_ptr<float>();
  const float* va = v_a.data_ptr<float>();
  const float* vg = flexible ? v_g.data_ptr<float>() : nullptr;
  const float* FB = feedback.data_ptr<float>();
  float* X = x.data_ptr<float>();
  float* QG = qg.data_ptr<float>();
  float* GATES = gates.data_ptr<float>();
  float* CELL = cell.data_ptr<float>();
  float* HC = hc.data_ptr<float>();
  float* ATT = attention.data_ptr<float>();
  float* POS = position.data_ptr<float>();
  float* GOUT = g_out.data_ptr<float>();
  int64_t* WIN = window.data_ptr<int64_t>();
  int64_t* LO = span_lo.data_ptr<int64_t>();
  int64_t* HI = span_hi.data_ptr<int64_t>();
  float va_sum = 0.f;
  for (int64_t a = 0; a < A; ++a) va_sum += va[a];
  const float sigma_f = static_cast<float>(sigma);
  const float two_sigma2 = static_cast<float>(2.0 * sigma * sigma);
  const float gb = static_cast<float>(b_g);
  const float* WQG = w_qg.data_ptr<float>();
  const float* WX = w_x.data_ptr<float>();
  const float* PG = small ? ctx_gates.data_ptr<float>() : nullptr;
  std::vector<float> prev_pos(B, 1.f);  // p_0 = 1
  float* P = prev_pos.data();
  int64_t t_max = 0;
  for (int64_t b = 0; b < B; ++b) t_max = std::max(t_max, n_steps[b]);

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

  for (int64_t t = 0; t < t_max; ++t) {
    if (small) {  // B x (A + G)
      gemv_batch(X + C, C + H, WQG, nullptr, 0, QG, A + G, H, A + G, B, t, n_steps);
    } else {
      at::mm_out(qg, h_prev, w_qg);
    }
    at::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        if (t >= n_steps[b]) continue;
        const float* q = QG + b * (A + G);
        const float p = P[b];
        float g = 0.f;
        int64_t lo = 1, hi = len[b];
        if (flexible) {  // 2017 eq. 8
          g = sigmoid(tanh_dot(q + A, FB + (t * B + b) * F + 4 * H, vg, G) + gb);
          if (!dense) vision_span(p, g, sigma_f, tau, len[b], &lo, &hi);
        }
        float* a_row = ATT + (b * T + t) * S;
        const float* k_row = K + b * S * A;
        int64_t scored = 0;
        float top = -std::numeric_limits<float>::infinity();
        for (int64_t s = lo - 1; s < hi; ++s, ++scored) {  // eq. 3 over the span only
          float e = 2.f * additive_half(q, k_row + s * A, va, A) - va_sum;
          if (flexible) {  // eqs. 5-6
            const float d = static_cast<float>(s + 1) - p;
            e -= g * (d * d / two_sigma2);
          }
          a_row[s] = e;
          top = std::max(top, e);
        }
        float z = 0.f;
        for (int64_t s = lo - 1; s < hi; ++s) z += (a_row[s] = std::exp(a_row[s] - top));
        const float inv = 1.f / z;
        float* ctx = X + b * (C + H);
        std::fill(ctx, ctx + C, 0.f);
        float p_t = 0.f;
        for (int64_t s = lo - 1; s < hi; ++s) {  // eqs. 7, 1 and 4
          const float w = (a_row[s] *= inv);
          axpy(w, V + (b * S + s) * C, ctx, C);
          p_t += w * static_cast<float>(s + 1);
        }
        std::copy(ctx, ctx + C, HC + (t * B + b) * (H + C) + H);
        P[b] = p_t;
        POS[b * T + t] = p_t;
        GOUT[b * T + t] = g;
        WIN[b * T + t] = scored;
        LO[b * T + t] = lo;
        HI[b * T + t] = hi;
      }
    });
    lap(attention_s);
    // B x 4H: W_ie i_t + b + W_ic c_t + W_hh h_{t-1}
    if (small) {
      gemv_batch(X + C, C + H, WX + C * 4 * H, FB + t * B * F, F, GATES, 4 * H, H, 4 * H, B, t, n_steps);
      for (int64_t b = 0; b < B; ++b) {
        if (t >= n_steps[b]) continue;
        const float* a_row = ATT + (b * T + t) * S;
        for (int64_t s = LO[b * T + t] - 1; s < HI[b * T + t]; ++s)
          axpy(a_row[s], PG + (b * S + s) * 4 * H, GATES + b * 4 * H, 4 * H);
      }
    } else {
      at::addmm_out(gates, feedback[t].narrow(1, 0, 4 * H), x, w_x);
    }
    at::parallel_for(0, B, 8, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        if (t >= n_steps[b]) continue;
        lstm_cell(GATES + b * 4 * H, CELL + b * H, X + b * (C + H) + C, HC + (t * B + b) * (H + C), H);
      }
    });
    lap(lstm_s);
  }
  auto phases = torch::tensor({attention_s, lstm_s}, torch::kFloat64);
  return {hc, attention, window, span_lo, span_hi, position, g_out, phases};
}

// The encoder's bidirectional LSTM (torch.nn.LSTM, one layer, batch_first) over the real
// positions of each row, the two directions on two threads at once. gates_x B x S x 8H: the
// input projections of every position, [W_ih_fwd x_s + b_fwd (4H); W_ih_bwd x_s + b_bwd (4H)]
// (one product by the caller); w_hh_fwd / w_hh_bwd H x 4H (W_hh transposed); src_len B.
// Returns the states B x S x 2H ([forward; backward], zeros at padding): the forward direction
// runs s = 1..S_b, the backward one s = S_b..1, each from a zero state.
torch::Tensor bilstm(torch::Tensor gates_x, torch::Tensor w_hh_fwd, torch::Tensor w_hh_bwd, torch::Tensor src_len) {
  check_f32(gates_x, "gates_x", 3);
  check_f32(w_hh_fwd, "w_hh_fwd", 2);
  check_f32(w_hh_bwd, "w_hh_bwd", 2);
  check(src_len, "src_len", 1);
  TORCH_CHECK(src_len.scalar_type() == at::kLong, "src_len must be int64");
  const int64_t B = gates_x.size(0), S = gates_x.size(1), H = w_hh_fwd.size(0);
  TORCH_CHECK(gates_x.size(2) == 8 * H && w_hh_fwd.size(1) == 4 * H && w_hh_bwd.size(0) == H &&
                  w_hh_bwd.size(1) == 4 * H && src_len.size(0) == B,
              "bilstm: gates_x must be B x S x 8H, w_hh_* H x 4H, src_len B");
  const int64_t* len = src_len.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    TORCH_CHECK(len[b] >= 1 && len[b] <= S, "src_len[", b, "] = ", len[b], " is outside [1, ", S, "]");
  auto states = torch::zeros({B, S, 2 * H}, gates_x.options());
  const float* GX = gates_x.data_ptr<float>();
  float* OUT = states.data_ptr<float>();
  const bool small = B <= kSmallBatch;
  at::parallel_for(0, 2, 1, [&](int64_t d0, int64_t d1) {
    for (int64_t d = d0; d < d1; ++d) {
      const torch::Tensor& w_hh = d == 0 ? w_hh_fwd : w_hh_bwd;
      const float* W = w_hh.data_ptr<float>();
      auto h = torch::zeros({B, H}, gates_x.options());
      auto c = torch::zeros({B, H}, gates_x.options());
      auto gates = torch::empty({B, 4 * H}, gates_x.options());
      float* HP = h.data_ptr<float>();
      float* CP = c.data_ptr<float>();
      float* GP = gates.data_ptr<float>();
      for (int64_t step = 0; step < S; ++step) {
        const int64_t s = d == 0 ? step : S - 1 - step;
        if (small) {
          for (int64_t b = 0; b < B; ++b)
            if (s < len[b])
              gemv_cols(HP + b * H, W, GX + (b * S + s) * 8 * H + d * 4 * H, GP + b * 4 * H, H, 4 * H, 0, 4 * H);
        } else {  // inside this thread: the library runs it on this thread alone (fused.py
                  // calls this for small batches only; oneDNN's LSTM is faster on large ones)
          at::addmm_out(gates, gates_x.select(1, s).narrow(1, d * 4 * H, 4 * H), h, w_hh);
        }
        for (int64_t b = 0; b < B; ++b)
          if (s < len[b])
            lstm_cell(GP + b * 4 * H, CP + b * H, HP + b * H, OUT + (b * S + s) * 2 * H + d * H, H);
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
int small_batch() { return static_cast<int>(kSmallBatch); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forced_decode", &forced_decode, "fused forced decoding of a batch (see the file's header)");
  m.def("bilstm", &bilstm, "the encoder's bidirectional LSTM over the real positions of each row");
  m.def("vision_spans", &vision_spans, "the kernel's vision span for given p, g and S (for tests)");
  m.def("vector_width", &vector_width, "floats per SIMD vector this build uses");
  m.def("small_batch", &small_batch, "batches of up to this many rows take the matrix-vector path");
}
