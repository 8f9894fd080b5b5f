// The in-browser half of lessons_src.ModelExplorer (lessons_src/explorer.py; CONTRIBUTING.md, "Model explorer").
// Wrapped by to_html() in (function(){ var root = <the explorer's div>; ... })(): plain JavaScript, typed arrays,
// no framework, no network. Reads the JSON config (architecture, base64 weights) from the div, registers
// window.lessonsModels[id] = {forward(text) -> {tokens, logits, attention, text, messages}} and drives the controls.
var cfg = JSON.parse(root.querySelector(".lsx-config").textContent);
var D = cfg.d_model, H = cfg.num_heads, HKV = cfg.kv_heads, DK = cfg.head_dim, NL = cfg.num_layers;
var CHARS = cfg.chars, V = CHARS.length, MAXLEN = cfg.page_max_len, GROUP = H / HKV;
// Today's switches (DecoderConfig) and latent attention (MLADecoderLM); absent in older configs: off.
var MLA = cfg.kind === "MLADecoderLM", WINDOWS = cfg.windows || [], SCALE = cfg.scale || 1 / Math.sqrt(DK);
var SOFTCAP = cfg.softcap || 0, SINKS = !!cfg.sinks, GATE = !!cfg.gate, QKNORM = !!cfg.qk_norm;
var PLUS1 = !!cfg.norm_plus_one, ANSWERS = cfg.answers || null;

// -- the weights: base64 -> little-endian float32 or float16 -> Float32Array views by name ----------------------
var W = (function () {
  var bin = atob(cfg.weights), n = bin.length, bytes = new Uint8Array(n);
  for (var i = 0; i < n; i++) bytes[i] = bin.charCodeAt(i);
  var view = new DataView(bytes.buffer), all;
  if (cfg.dtype === "float16") {
    all = new Float32Array(n / 2);
    for (var k = 0; k < all.length; k++) {
      var h = view.getUint16(2 * k, true), s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, f = h & 0x3ff;
      all[k] = e === 0 ? s * f * Math.pow(2, -24) : e === 31 ? (f ? NaN : s * Infinity) : s * (1 + f / 1024) * Math.pow(2, e - 15);
    }
  } else {
    all = new Float32Array(n / 4);
    for (var m = 0; m < all.length; m++) all[m] = view.getFloat32(4 * m, true);
  }
  var named = {};
  cfg.tensors.forEach(function (t) { named[t[0]] = all.subarray(t[1], t[1] + t[2]); });
  return named;
})();
var IDS = {};
CHARS.forEach(function (c, i) { IDS[c] = i; });

// -- fixed tables: sinusoidal positions and rotary angles (float64, rounded to float32 as torch does) -----------
var SIN_POS = null, ROPE = null;
if (cfg.positions === "sinusoidal") {
  SIN_POS = new Float32Array(cfg.max_len * D);
  for (var p = 0; p < cfg.max_len; p++) {
    for (var i2 = 0; 2 * i2 < D; i2++) {
      var angle = p * Math.exp(-Math.log(10000) * (2 * i2) / D);
      SIN_POS[p * D + 2 * i2] = Math.sin(angle);
      if (2 * i2 + 1 < D) SIN_POS[p * D + 2 * i2 + 1] = Math.cos(angle);
    }
  }
}
function ropeTable(dim, interleaved) {  // cos and sin of i * base^(-2p/dim), pairs p < dim / 2, as rope_frequencies
  var half = dim / 2, t = {cos: new Float32Array(cfg.max_len * half), sin: new Float32Array(cfg.max_len * half),
                           dim: dim, half: half, interleaved: interleaved};
  for (var pos = 0; pos < cfg.max_len; pos++) {
    for (var pr = 0; pr < half; pr++) {
      var theta = Math.pow(cfg.rope_base, -(2 * pr) / dim);
      t.cos[pos * half + pr] = Math.cos(pos * theta);
      t.sin[pos * half + pr] = Math.sin(pos * theta);
    }
  }
  return t;
}
if (cfg.positions === "rope") ROPE = ropeTable(DK, cfg.rope_layout !== "half");
if (MLA) ROPE = ropeTable(cfg.qk_rope_head_dim, true);  // the decoupled rotary part: interleaved pairs

// -- the maths, row-major Float64Arrays (L rows) ---------------------------------------------------------------
function linear(x, L, nIn, w, b, nOut) {  // y = x W^T + b, W stored (nOut, nIn) as nn.Linear keeps it
  // Four rows at a time, so each weight is read once per four tokens: 2.6x faster in V8 than row by row
  // (measured with node on 64 x 64 x 256); each sum still runs over k in order.
  var y = new Float64Array(L * nOut), i = 0, o, k, s;
  for (; i + 3 < L; i += 4) {
    var x0 = i * nIn, x1 = x0 + nIn, x2 = x1 + nIn, x3 = x2 + nIn;
    for (o = 0; o < nOut; o++) {
      var wo = o * nIn, bias = b ? b[o] : 0, s0 = bias, s1 = bias, s2 = bias, s3 = bias;
      for (k = 0; k < nIn; k++) {
        var wk = w[wo + k];
        s0 += x[x0 + k] * wk; s1 += x[x1 + k] * wk; s2 += x[x2 + k] * wk; s3 += x[x3 + k] * wk;
      }
      y[i * nOut + o] = s0; y[(i + 1) * nOut + o] = s1; y[(i + 2) * nOut + o] = s2; y[(i + 3) * nOut + o] = s3;
    }
  }
  for (; i < L; i++) {
    var xo = i * nIn, yo = i * nOut;
    for (o = 0; o < nOut; o++) {
      var wr = o * nIn;
      s = b ? b[o] : 0;
      for (k = 0; k < nIn; k++) s += x[xo + k] * w[wr + k];
      y[yo + o] = s;
    }
  }
  return y;
}
function rowNorm(x, rows, n, kind, eps, w, b, plusOne) {  // LayerNorm (biased variance) or RMSNorm over rows of n
  var y = new Float64Array(rows * n);
  for (var i = 0; i < rows; i++) {
    var o = i * n, mean = 0, sq = 0, k;
    if (kind === "layer") {
      for (k = 0; k < n; k++) mean += x[o + k];
      mean /= n;
    }
    for (k = 0; k < n; k++) { var c = x[o + k] - mean; sq += c * c; }
    var scale = 1 / Math.sqrt(sq / n + eps);
    for (k = 0; k < n; k++) y[o + k] = (x[o + k] - mean) * scale * (plusOne ? 1 + w[k] : w[k]) + (b ? b[k] : 0);
  }
  return y;
}
function norm(x, L, kind, eps, w, b) {  // a block's norm over each row of D (Gemma's RMSNorm: times 1 + weight)
  return rowNorm(x, L, D, kind, eps, w, b, PLUS1 && kind === "rms");
}
function erf(x) {  // Numerical Recipes' erfc (Chebyshev fit, fractional error < 1.2e-7): JavaScript has no Math.erf
  var z = Math.abs(x), t = 1 / (1 + 0.5 * z);
  var r = t * Math.exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 +
    t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
  return x >= 0 ? 1 - r : r - 1;
}
function rope(x, L, heads, stride, offset) {  // rotate, in place, the ROPE.dim features at offset of each head's
  // stride: interleaved pairs (2p, 2p+1) or halves (p, p + dim/2)
  var half = ROPE.half, interleaved = ROPE.interleaved;
  for (var i = 0; i < L; i++) {
    for (var h = 0; h < heads; h++) {
      var o = (i * heads + h) * stride + offset;
      for (var p = 0; p < half; p++) {
        var a = interleaved ? o + 2 * p : o + p, b = interleaved ? a + 1 : a + half;
        var c = ROPE.cos[i * half + p], s = ROPE.sin[i * half + p], x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
      }
    }
  }
}
function softmaxRows(L, l, h, score, w, share, onRow) {  // one head: score(i, j) -> the weights w (L x L)
  // Causal, the layer's sliding window (query i sees i - window < j <= i), and the head's learned sink, a logit
  // in the denominator only (its share goes to share[i]). onRow(i, j, p) gets each weight as it is made.
  var window = WINDOWS[l] || 0, sink = SINKS ? W["l" + l + ".sinks"][h] : -Infinity, row = new Float64Array(L);
  for (var i = 0; i < L; i++) {
    var lo = window ? Math.max(0, i - window + 1) : 0, best = sink, j;
    for (j = lo; j <= i; j++) {
      var s = score(i, j);
      row[j] = s;
      if (s > best) best = s;
    }
    var rest = SINKS ? Math.exp(sink - best) : 0, total = rest;
    for (j = lo; j <= i; j++) { row[j] = Math.exp(row[j] - best); total += row[j]; }
    if (share) share[i] = rest / total;
    for (j = lo; j <= i; j++) { var p = row[j] / total; w[i * L + j] = p; onRow(i, j, p); }
  }
}
function attention(x, L, l, att, shares) {  // causal self-attention of layer l; fills att[h] (L x L); returns (L, D)
  if (MLA) return latentAttention(x, L, l, att);
  var pre = "l" + l + ".", qd = H * DK;
  var q = linear(x, L, D, W[pre + "wq"], W[pre + "bq"], GATE ? 2 * qd : qd);  // (L, H, d_k) or (L, H, 2 d_k)
  var k = linear(x, L, D, W[pre + "wk"], W[pre + "bk"], HKV * DK);  // (L, H_kv, d_k)
  var v = linear(x, L, D, W[pre + "wv"], W[pre + "bv"], HKV * DK);  // (L, H_kv, d_k)
  var gate = null, i, h, d;
  if (GATE) {  // q_proj gives each head [query | gate]
    var both = q;
    q = new Float64Array(L * qd); gate = new Float64Array(L * qd);
    for (i = 0; i < L * H; i++) {
      for (d = 0; d < DK; d++) { q[i * DK + d] = both[i * 2 * DK + d]; gate[i * DK + d] = both[i * 2 * DK + DK + d]; }
    }
  }
  if (QKNORM) {  // one RMSNorm of d_k on each head's query and key, before the rotation
    q = rowNorm(q, L * H, DK, "rms", cfg.eps, W[pre + "qnw"], null, PLUS1);
    k = rowNorm(k, L * HKV, DK, "rms", cfg.eps, W[pre + "knw"], null, PLUS1);
  }
  if (cfg.positions === "rope") { rope(q, L, H, DK, 0); rope(k, L, HKV, DK, 0); }
  var out = new Float64Array(L * qd);
  for (h = 0; h < H; h++) {
    var g = Math.floor(h / GROUP), slope = cfg.positions === "alibi" ? cfg.alibi_slopes[h] : 0;
    softmaxRows(L, l, h, function (i, j) {
      var qo = (i * H + h) * DK, ko = (j * HKV + g) * DK, s = 0;
      for (var d2 = 0; d2 < DK; d2++) s += q[qo + d2] * k[ko + d2];
      s *= SCALE;
      if (SOFTCAP) s = SOFTCAP * Math.tanh(s / SOFTCAP);
      return s - slope * (i - j);
    }, att[h], shares ? shares[h] : null, function (i, j, p) {
      var oo = (i * H + h) * DK, vo = (j * HKV + g) * DK;
      for (var d2 = 0; d2 < DK; d2++) out[oo + d2] += p * v[vo + d2];
    });
  }
  if (GATE) for (i = 0; i < L * qd; i++) out[i] *= 1 / (1 + Math.exp(-gate[i]));
  return linear(out, L, qd, W[pre + "wo"], W[pre + "bo"], D);
}
function latentAttention(x, L, l, att) {  // multi-head latent attention, the plain form (keys projected up)
  var pre = "l" + l + ".", dn = cfg.qk_nope_head_dim, dr = cfg.qk_rope_head_dim, dv = cfg.v_head_dim;
  var dc = cfg.kv_lora_rank, dq = cfg.q_lora_rank, dqk = dn + dr, i, d;
  var q = dq ? linear(rowNorm(linear(x, L, D, W[pre + "wqa"], null, dq), L, dq, "rms", cfg.latent_eps, W[pre + "qan"],
                              null, false), L, dq, W[pre + "wqb"], null, H * dqk)
             : linear(x, L, D, W[pre + "wq"], null, H * dqk);  // (L, H, d_k + d_R)
  var both = linear(x, L, D, W[pre + "wkva"], null, dc + dr);  // (L, d_c + d_R): [latent | rotary key]
  var latent = new Float64Array(L * dc), rk = new Float64Array(L * dr);
  for (i = 0; i < L; i++) {
    for (d = 0; d < dc; d++) latent[i * dc + d] = both[i * (dc + dr) + d];
    for (d = 0; d < dr; d++) rk[i * dr + d] = both[i * (dc + dr) + dc + d];
  }
  latent = rowNorm(latent, L, dc, "rms", cfg.latent_eps, W[pre + "kvan"], null, false);  // the rotary key: not normed
  rope(q, L, H, dqk, dn); rope(rk, L, 1, dr, 0);  // each head's rotary part, and the one shared rotary key
  var kv = linear(latent, L, dc, W[pre + "wkvb"], null, H * (dn + dv));  // (L, H, d_k + d_v): keys and values
  var out = new Float64Array(L * H * dv);
  for (var h = 0; h < H; h++) {
    softmaxRows(L, l, h, function (i2, j) {
      var qo = (i2 * H + h) * dqk, ko = (j * H + h) * (dn + dv), ro = j * dr, s = 0, d2;
      for (d2 = 0; d2 < dn; d2++) s += q[qo + d2] * kv[ko + d2];
      for (d2 = 0; d2 < dr; d2++) s += q[qo + dn + d2] * rk[ro + d2];
      return s * SCALE;
    }, att[h], null, function (i2, j, p) {
      var oo = (i2 * H + h) * dv, vo = (j * H + h) * (dn + dv) + dn;
      for (var d2 = 0; d2 < dv; d2++) out[oo + d2] += p * kv[vo + d2];
    });
  }
  return linear(out, L, H * dv, W[pre + "wo"], null, D);
}
function mlp(x, L, l) {
  var pre = "l" + l + ".", up = linear(x, L, D, W[pre + "wup"], W[pre + "bup"], W[pre + "wup"].length / D);
  var n = up.length, i;
  if (cfg.ffn === "swiglu") {
    var gate = linear(x, L, D, W[pre + "wgate"], W[pre + "bgate"], n / L);
    for (i = 0; i < n; i++) up[i] = gate[i] / (1 + Math.exp(-gate[i])) * up[i];
  } else if (cfg.ffn === "gelu") {
    for (i = 0; i < n; i++) up[i] = 0.5 * up[i] * (1 + erf(up[i] / Math.SQRT2));
  } else if (cfg.ffn === "gelu_tanh") {  // GPT-2's approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    for (i = 0; i < n; i++) up[i] = 0.5 * up[i] * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (up[i] + 0.044715 * up[i] * up[i] * up[i])));
  } else {
    for (i = 0; i < n; i++) if (up[i] < 0) up[i] = 0;
  }
  return linear(up, L, n / L, W[pre + "wdown"], W[pre + "bdown"], D);
}
function add(x, y) { for (var i = 0; i < x.length; i++) x[i] += y[i]; return x; }

// -- the text the model reads: the same rules and messages as ModelExplorer.prepare -----------------------------
var NAMED = {" ": "space", "\n": "newline", "\t": "tab", "\r": "carriage return"};
function describe(c) {
  if (NAMED[c]) return NAMED[c];
  if (/^[\p{C}\p{Z}]$/u.test(c)) return "U+" + c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
  return "'" + c + "'";
}
function count(n) { return n.toLocaleString("en-US"); }
function prepare(text) {
  var messages = [], total = 0, huge = false;
  if (typeof text !== "string") text = text == null ? "" : String(text);
  if (text.length > cfg.max_chars) {  // cut first: a pasted megabyte is never scanned at each keystroke
    total = Array.from(text).length;
    huge = total > cfg.max_chars;
    if (huge) {
      text = Array.from(text.slice(-2 * cfg.max_chars)).slice(-cfg.max_chars).join("");
      messages.push("Your text has " + count(total) + " characters: the model reads its end, so only the last " +
        count(cfg.max_chars) + " are looked at.");
    }
  }
  var chars = Array.from(text), kept = [], unknown = [], seen = {}, skipped = 0;
  chars.forEach(function (c) {
    if (c in IDS) kept.push(c);
    else { skipped++; if (!seen[c]) { seen[c] = true; unknown.push(c); } }
  });
  if (unknown.length) {
    messages.push("Skipped " + skipped + " character" + (skipped !== 1 ? "s" : "") + " the model does not know: " +
      unknown.slice(0, 12).map(describe).join(", ") + (unknown.length > 12 ? " and " + (unknown.length - 12) + " more" : "") + ".");
  }
  if (!kept.length) messages.push("Type some text: the model predicts the character that follows it.");
  else if (kept.length > MAXLEN) {
    messages.push("The model reads at most " + MAXLEN + " characters (its max_len): it sees the last " + MAXLEN +
      " of the " + (huge ? "" : count(kept.length) + " ") + "characters it knows" + (huge ? " among them" : "") + ".");
    kept = kept.slice(-MAXLEN);
  }
  return {text: kept.join(""), chars: kept, messages: messages};
}

// -- the forward pass: text -> {tokens, logits (L x |V|), attention[layer][head] (L x L)} --------------------------
function run(tokens) {
  var L = tokens.length, x = new Float64Array(L * D), i, k, l, h;
  for (i = 0; i < L; i++) {
    var e = tokens[i] * D;
    for (k = 0; k < D; k++) {
      var pe = cfg.positions === "learned" ? W.pos[i * D + k] : cfg.positions === "sinusoidal" ? SIN_POS[i * D + k] : 0;
      x[i * D + k] = W.embed[e + k] + pe;
    }
  }
  var att = [], sinks = SINKS ? [] : null;
  for (l = 0; l < NL; l++) {
    att.push([]);
    for (h = 0; h < H; h++) att[l].push(new Float64Array(L * L));
    if (sinks) { sinks.push([]); for (h = 0; h < H; h++) sinks[l].push(new Float64Array(L)); }
    var pre = "l" + l + ".", shares = sinks ? sinks[l] : null;
    if (cfg.placement === "none") {  // attention-only: x + attention(x)
      add(x, attention(x, L, l, att[l], shares));
    } else if (cfg.placement === "pre") {
      add(x, attention(norm(x, L, cfg.norm, cfg.eps, W[pre + "n1w"], W[pre + "n1b"]), L, l, att[l], shares));
      add(x, mlp(norm(x, L, cfg.norm, cfg.eps, W[pre + "n2w"], W[pre + "n2b"]), L, l));
    } else {
      x = norm(add(x, attention(x, L, l, att[l], shares)), L, cfg.norm, cfg.eps, W[pre + "n1w"], W[pre + "n1b"]);
      x = norm(add(x, mlp(x, L, l)), L, cfg.norm, cfg.eps, W[pre + "n2w"], W[pre + "n2b"]);
    }
  }
  if (cfg.final_norm) x = norm(x, L, cfg.final_norm_kind, cfg.final_eps, W.fnw, W.fnb);
  return {logits: linear(x, L, D, W.head, W.head_b, V), att: att, sinks: sinks, L: L};
}
function forward(text) {
  var prepared = prepare(text), tokens = prepared.chars.map(function (c) { return IDS[c]; });
  var r = run(tokens), L = r.L, logits = [], attention = [];
  for (var i = 0; i < L; i++) logits.push(r.logits.subarray(i * V, (i + 1) * V));
  r.att.forEach(function (heads) {
    attention.push(heads.map(function (w) {
      var rows = [];
      for (var i2 = 0; i2 < L; i2++) rows.push(w.subarray(i2 * L, (i2 + 1) * L));
      return rows;
    }));
  });
  var result = {tokens: tokens, logits: logits, attention: attention, text: prepared.text,
                messages: prepared.messages, flat: r};
  if (r.sinks) result.sinks = r.sinks.map(function (heads) { return heads.map(function (s) { return Array.from(s); }); });
  return result;
}
window.lessonsModels = window.lessonsModels || {};
window.lessonsModels[cfg.id] = {forward: forward, prepare: prepare, chars: CHARS, max_len: MAXLEN, answers: ANSWERS};

// -- the page ----------------------------------------------------------------------------------------------------
var box = root.querySelector(".lsx-text"), msg = root.querySelector(".lsx-msg");
var temp = root.querySelector(".lsx-temp"), tempOut = root.querySelector(".lsx-temp-out");
var layerSel = root.querySelector(".lsx-layer"), headSel = root.querySelector(".lsx-head");
var bars = root.querySelector(".lsx-bar-list"), big = root.querySelector(".lsx-big");
var heatTitle = root.querySelector(".lsx-heat-title"), grid = root.querySelector(".lsx-grid");
var more = root.querySelector(".lsx-continue"), bigBox = big.parentNode;
function newest() { bigBox.scrollLeft = bigBox.scrollWidth; }  // the newest column, the last query's keys, in view
if (window.ResizeObserver) new ResizeObserver(newest).observe(bigBox);  // after a resize or a turned phone too
var last = null, redraws = 0, rngState = (cfg.seed >>> 0) || 1;

function random() {  // mulberry32: a seeded sampler, so a page samples the same continuation each visit
  rngState = (rngState + 0x6D2B79F5) >>> 0;
  var t = rngState;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
var STOPS = [[68, 1, 84], [72, 40, 120], [62, 73, 137], [49, 104, 142], [38, 130, 142], [31, 158, 137],
             [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37]];  // viridis
var LUT = new Uint8Array(256 * 3);
for (var li = 0; li < 256; li++) {
  var pos2 = li / 255 * (STOPS.length - 1), lo = Math.min(Math.floor(pos2), STOPS.length - 2), fr = pos2 - lo;
  for (var ch = 0; ch < 3; ch++) LUT[li * 3 + ch] = Math.round(STOPS[lo][ch] * (1 - fr) + STOPS[lo + 1][ch] * fr);
}
function image(w, L, window) {  // the L x L weights as an ImageData; masked keys light grey: the future (j > i)
  // and, on a sliding layer, the keys outside the window (j <= i - window)
  var img = new ImageData(L, L), d = img.data;
  for (var i = 0; i < L; i++) {
    for (var j = 0; j < L; j++) {
      var o = 4 * (i * L + j);
      if (j > i || (window && j <= i - window)) { d[o] = d[o + 1] = d[o + 2] = 236; } else {
        var c = Math.max(0, Math.min(255, Math.round(w[i * L + j] * 255))) * 3;
        d[o] = LUT[c]; d[o + 1] = LUT[c + 1]; d[o + 2] = LUT[c + 2];
      }
      d[o + 3] = 255;
    }
  }
  return img;
}
var scratch = document.createElement("canvas");
function shown(c) { return c === " " ? "\u2423" : c === "\n" ? "\u21b5" : c === "\t" ? "\u21e5" : c; }

function resize(canvas, w, h, dpr, css) {  // only when the size changes: a resize reallocates the canvas
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr);
    if (css) { canvas.style.width = w + "px"; canvas.style.height = h + "px"; }
  }
}
function layerName(l) { return "layer " + (l + 1) + (WINDOWS[l] ? " (sliding, window " + WINDOWS[l] + ")" : ""); }
function drawBig() {
  var l = +layerSel.value, h = +headSel.value, ctx = big.getContext("2d"), dpr = window.devicePixelRatio || 1;
  heatTitle.textContent = "Attention of " + layerName(l) + ", head " + h + " (row: the query i, column: the key j" +
    (SINKS ? "; last column: the learned sink" : "") + ")";
  var L = last ? last.flat.L : 0;
  if (!L) {
    resize(big, 280, 60, dpr, true);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, 280, 60);
    ctx.fillStyle = "#444"; ctx.font = "14px sans-serif"; ctx.fillText("No characters to attend to yet.", 10, 34);
    big.setAttribute("aria-label", "No attention to show: there is no text the model knows.");
    return;
  }
  var cell = Math.max(10, Math.min(28, Math.floor(448 / L))), m = 14, gap = SINKS ? 6 : 0;
  // The queries are labelled on both sides: the box keeps its right edge in view (the newest keys), where
  // a long map's left labels are scrolled away.
  var right = m + L * cell + (SINKS ? gap + cell : 0), width = right + m, height = m + L * cell;
  resize(big, width, height, dpr, true);
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, width, height);
  var w = last.flat.att[l][h], i;
  resize(scratch, L, L, 1);
  scratch.getContext("2d").putImageData(image(w, L, WINDOWS[l] || 0), 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(scratch, m, m, L * cell, L * cell);
  var sinkShare = SINKS ? last.flat.sinks[l][h] : null;
  if (sinkShare) {  // the sink's column: each query's weight on no key at all
    for (i = 0; i < L; i++) {
      var c = Math.max(0, Math.min(255, Math.round(sinkShare[i] * 255))) * 3;
      ctx.fillStyle = "rgb(" + LUT[c] + "," + LUT[c + 1] + "," + LUT[c + 2] + ")";
      ctx.fillRect(m + L * cell + gap, m + i * cell, cell, cell);
    }
  }
  ctx.fillStyle = "#222"; ctx.font = Math.min(cell, 13) + "px monospace"; ctx.textAlign = "center"; ctx.textBaseline = "middle";
  var chars = last.prepared;
  for (i = 0; i < L; i++) {
    ctx.fillText(shown(chars[i]), m + (i + 0.5) * cell, m / 2);
    ctx.fillText(shown(chars[i]), m / 2, m + (i + 0.5) * cell);
    ctx.fillText(shown(chars[i]), right + m / 2, m + (i + 0.5) * cell);
  }
  if (sinkShare) ctx.fillText("\u2205", m + L * cell + gap + cell / 2, m / 2);  // the sink: no key
  var top = 0;
  for (var j = 1; j < L; j++) if (w[(L - 1) * L + j] > w[(L - 1) * L + top]) top = j;
  big.setAttribute("aria-label", "Attention weights of " + layerName(l) + ", head " + h + " over " + L +
    " characters. The last character, " + describe(chars[L - 1]) + ", attends most to " + describe(chars[top]) +
    " at position " + top + " (weight " + w[(L - 1) * L + top].toFixed(2) + ")" +
    (sinkShare ? " and gives the learned sink " + sinkShare[L - 1].toFixed(2) : "") + ".");
  big.dataset.cell = cell; big.dataset.margin = m;
  newest();
}
var cells = [];
function buildGrid() {
  grid.style.gridTemplateColumns = "auto repeat(" + H + ", auto)";
  grid.appendChild(document.createElement("span"));
  for (var hh = 0; hh < H; hh++) {  // column heads: the head, and the key/value head it reads when they are shared
    var top = document.createElement("span");
    top.className = "lsx-col-label";
    top.textContent = "head " + hh + (HKV < H ? " (kv " + Math.floor(hh / GROUP) + ")" : "");
    grid.appendChild(top);
  }
  for (var l = 0; l < NL; l++) {
    var label = document.createElement("span");
    label.className = "lsx-row-label"; label.textContent = layerName(l);
    grid.appendChild(label);
    for (var h = 0; h < H; h++) {
      var b = document.createElement("button"), c = document.createElement("canvas");
      b.type = "button"; b.setAttribute("aria-label", "show " + layerName(l) + ", head " + h + " large");
      b.dataset.layer = l; b.dataset.head = h; b.title = layerName(l) + ", head " + h;
      c.setAttribute("aria-hidden", "true"); c.style.width = "72px"; c.style.height = "72px";
      c.style.imageRendering = "pixelated";
      b.appendChild(c); grid.appendChild(b); cells.push({button: b, canvas: c, l: l, h: h});
      b.addEventListener("click", function () {
        layerSel.value = this.dataset.layer; headSel.value = this.dataset.head; drawBig(); markPressed();
        big.scrollIntoView({block: "nearest"});  // on a phone the large map is far above the small ones
      });
    }
  }
}
function markPressed() {
  cells.forEach(function (c) {
    c.button.setAttribute("aria-pressed", String(c.l === +layerSel.value && c.h === +headSel.value));
  });
}
function drawGrid() {
  var L = last ? last.flat.L : 0;
  cells.forEach(function (c) {
    var ctx = c.canvas.getContext("2d");
    if (!L) { resize(c.canvas, 1, 1, 1); ctx.fillStyle = "#ececec"; ctx.fillRect(0, 0, 1, 1); return; }
    resize(c.canvas, L, L, 1);
    ctx.putImageData(image(last.flat.att[c.l][c.h], L, WINDOWS[c.l] || 0), 0, 0);
  });
  markPressed();
}
var barRows = [];
for (var bi = 0; bi < cfg.top_k; bi++) {
  var row = document.createElement("li"), lab = document.createElement("span"), track = document.createElement("span");
  var fill = document.createElement("span"), pct = document.createElement("span");
  lab.className = "lsx-ch"; track.className = "lsx-track"; fill.className = "lsx-fill"; pct.className = "lsx-p";
  fill.style.display = "block"; fill.style.width = "0";
  track.appendChild(fill); row.appendChild(lab); row.appendChild(track); row.appendChild(pct); bars.appendChild(row);
  barRows.push({row: row, label: lab, fill: fill, pct: pct});
}
function probabilities(logits, tau, n) {  // softmax(logits / tau) over the first n logits
  var p = new Float64Array(n), best = -Infinity, total = 0, i;
  for (i = 0; i < n; i++) { p[i] = logits[i] / tau; if (p[i] > best) best = p[i]; }
  for (i = 0; i < n; i++) { p[i] = Math.exp(p[i] - best); total += p[i]; }
  for (i = 0; i < n; i++) p[i] /= total;
  return p;
}
function topK(p, k) {
  var order = [];
  for (var i = 0; i < p.length; i++) order.push(i);
  order.sort(function (a, b) { return p[b] - p[a] || a - b; });
  return order.slice(0, k);
}
function drawBars() {
  var tau = +temp.value;
  tempOut.textContent = tau.toFixed(2);
  var L = last ? last.flat.L : 0;
  if (!L) {
    barRows.forEach(function (b, i) {
      b.label.textContent = i ? "" : "\u2014"; b.fill.style.width = "0"; b.pct.textContent = "";
      b.row.removeAttribute("aria-label");
    });
    return;
  }
  var logits = last.flat.logits.subarray((L - 1) * V, L * V);
  if (ANSWERS) {  // a model that answers: every answer, in order, softmax over the answers' logits only
    var pa = probabilities(logits.subarray(0, ANSWERS.length), tau, ANSWERS.length);
    ANSWERS.forEach(function (name, i) {
      var b = barRows[i], text = (100 * pa[i]).toFixed(1) + "%";
      b.label.textContent = name; b.fill.style.width = (100 * pa[i]).toFixed(2) + "%"; b.pct.textContent = text;
      b.row.setAttribute("aria-label", name + " " + text);
    });
    return;
  }
  var p = probabilities(logits, tau, V);
  topK(p, cfg.top_k).forEach(function (t, i) {
    var b = barRows[i], text = (100 * p[t]).toFixed(1) + "%";
    b.label.textContent = shown(CHARS[t]); b.fill.style.width = (100 * p[t]).toFixed(2) + "%"; b.pct.textContent = text;
    b.row.setAttribute("aria-label", describe(CHARS[t]) + " " + text);
  });
}
function update() {  // the reader's text is never changed: prepare() reads what the model can of it
  var r = forward(box.value);
  r.prepared = r.chars = Array.from(r.text);
  last = r;
  msg.textContent = r.messages.join(" ");
  root.dataset.state = r.flat.L ? "ok" : "empty";
  drawBars(); drawBig(); drawGrid();
  redraws++;
  root.dataset.redraws = String(redraws);
  root.dataset.redrawEnd = String(performance.now());
}
function sample() {
  var text = last ? last.text : "", added = "", tau = +temp.value;
  if (!text) { msg.textContent = "Type some text first: the model continues it."; return; }
  for (var n = 0; n < cfg.continue_chars; n++) {
    var tokens = Array.from((text + added).slice(-4 * MAXLEN)).slice(-MAXLEN).map(function (c) { return IDS[c]; });
    var r = run(tokens), p = probabilities(r.logits.subarray((r.L - 1) * V, r.L * V), tau, V), top = topK(p, cfg.top_k);
    var total = 0, u, pick = top[top.length - 1];
    top.forEach(function (t) { total += p[t]; });
    u = random() * total;
    for (var i = 0; i < top.length; i++) { u -= p[top[i]]; if (u <= 0) { pick = top[i]; break; } }
    added += CHARS[pick];
  }
  box.value += added;
  box.scrollTop = box.scrollHeight;  // the characters just added, in view in the box
  update();
}
buildGrid();
box.addEventListener("input", update);
temp.addEventListener("input", drawBars);
layerSel.addEventListener("change", function () { drawBig(); markPressed(); });
headSel.addEventListener("change", function () { drawBig(); markPressed(); });
if (more) more.addEventListener("click", sample);
big.addEventListener("mousemove", function (ev) {
  if (!last || !last.flat.L) return;
  var cell = +big.dataset.cell, m = +big.dataset.margin, rect = big.getBoundingClientRect();
  var j = Math.floor((ev.clientX - rect.left - m) / cell), i = Math.floor((ev.clientY - rect.top - m) / cell);
  var L = last.flat.L;
  if (i < 0 || j < 0 || i >= L || j >= L) { big.title = ""; return; }
  var w = last.flat.att[+layerSel.value][+headSel.value][i * L + j];
  big.title = "query " + i + " " + describe(last.prepared[i]) + " \u2192 key " + j + " " + describe(last.prepared[j]) +
    (j > i ? ": the future, masked" : ": " + w.toFixed(3));
});
update();
