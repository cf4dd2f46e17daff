// The course's translators, run in the reader's browser: the ONNX files that `transformer export-onnx`
// writes (copied into the book by book/_ext/browser_translator.py), onnxruntime-web for the arithmetic and
// the sentencepiece library (compiled to WebAssembly) for the tokens. Nothing leaves the page: every file
// comes from the book's own _static folder.
//
// The decoding is `transformer.decoding.greedy_decode` for one sentence: encode once, then append the most
// probable next token until EOS or 1.5 * S + 10 tokens. The decoder graph has no cache: each step reruns
// the decoder on the whole prefix and returns every layer's cross-attention, so the last step's weights
// are the map of the whole translation.
import * as ort from "../onnxruntime-web/ort.wasm.min.mjs";
import { SentencePieceProcessor } from "../sentencepiece/sentencepiece.mjs";

const STATIC = new URL("../", import.meta.url);  // the book's _static/ folder
ort.env.wasm.wasmPaths = new URL("onnxruntime-web/", STATIC).href;
ort.env.wasm.numThreads = 1;  // threads need a cross-origin-isolated page, which a static book is not

const loaded = new Map();  // model name -> Promise of {meta, encoder, decoder, source, target}
const metas = new Map();  // model name -> Promise of its translator.json

async function fetchBytes(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return new Uint8Array(await response.arrayBuffer());
}

async function tokenizer(url) {
  const sp = new SentencePieceProcessor();
  await sp._loadModel(await fetchBytes(url));  // the library's loader that takes bytes (its public ones need Node)
  return sp;
}

export function metadata(name) {
  if (!metas.has(name)) {
    metas.set(name, fetch(new URL(`translator-models/${name}/translator.json`, STATIC)).then((r) => {
      if (!r.ok) throw new Error(`translator.json of ${name}: HTTP ${r.status}`);
      return r.json();
    }));
  }
  return metas.get(name);
}

export function load(name) {
  if (!loaded.has(name)) {
    const base = new URL(`translator-models/${name}/`, STATIC);
    loaded.set(name, (async () => {
      const meta = await metadata(name);
      const options = { executionProviders: ["wasm"], graphOptimizationLevel: "all" };
      const [encoder, decoder, source, target] = await Promise.all([
        ort.InferenceSession.create(await fetchBytes(new URL("encoder.onnx", base)), options),
        ort.InferenceSession.create(await fetchBytes(new URL("decoder.onnx", base)), options),
        tokenizer(new URL("source.model", base)),
        tokenizer(new URL("target.model", base)),
      ]);
      return { meta, encoder, decoder, source, target };
    })());
  }
  return loaded.get(name);
}

const ids = (values) => new ort.Tensor("int64", BigInt64Array.from(values, BigInt), [1, values.length]);

// One sentence -> {translation, sourcePieces, targetPieces, attention: [layer][head][t][s], seconds}.
export async function translate(name, sentence) {
  const started = performance.now();
  const m = await load(name);
  const meta = m.meta;
  let src = m.source.encodeIds(sentence.trim());
  if (src.length === 0) return { translation: "", sourcePieces: [], targetPieces: [], attention: [], seconds: 0 };
  src = src.slice(0, meta.max_len);
  const srcTensor = ids(src);
  const { memory } = await m.encoder.run({ src: srcTensor });
  const limit = Math.min(Math.max(Math.floor(meta.max_len_a * src.length) + Math.min(meta.max_len_b, meta.max_len), 1), meta.max_len - 1);
  const ys = [meta.bos_id];
  let cross = null;
  while (true) {
    const out = await m.decoder.run({ memory, src: srcTensor, tgt: ids(ys) });
    const scores = out.logits.data;
    let best = 0;
    for (let v = 1; v < scores.length; v++) if (scores[v] > scores[best]) best = v;  // argmax, first of ties
    ys.push(best);
    cross = out.cross_attention;
    if (best === meta.eos_id || ys.length - 1 >= limit) break;
  }
  const tokens = ys.slice(1);
  const content = tokens[tokens.length - 1] === meta.eos_id ? tokens.slice(0, -1) : tokens;
  const [N, , H, T, S] = cross.dims;  // (N, 1, h, T, S): the rows of the last step's inputs, BOS first
  const attention = [];
  for (let l = 0; l < N; l++) {
    attention.push([]);
    for (let h = 0; h < H; h++) {
      const rows = [];
      for (let t = 0; t < T; t++) rows.push(Array.from(cross.data.subarray(((l * H + h) * T + t) * S, ((l * H + h) * T + t + 1) * S)));
      attention[l].push(rows);
    }
  }
  return {
    translation: m.target.decodeIds(Int32Array.from(content)),
    sourcePieces: m.source.encodePieces(sentence.trim()).slice(0, meta.max_len),
    // row t predicts tokens[t]: label it with the piece it produced
    targetPieces: tokens.map((id) => (id === meta.eos_id ? "</s>" : m.target.decodeIds(Int32Array.from([id])) || "▁")),
    attention,
    seconds: (performance.now() - started) / 1000,
  };
}

// ---- the box on the page ------------------------------------------------------------------------------

function heatmap(canvas, matrix, rowLabels, colLabels) {
  const cell = 22, left = 90, top = 80;
  const ctx = canvas.getContext("2d");
  canvas.width = left + cell * colLabels.length + 10;
  canvas.height = top + cell * rowLabels.length + 10;
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  ctx.font = "12px sans-serif";
  ctx.fillStyle = "#222";
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  rowLabels.forEach((label, t) => ctx.fillText(label, left - 6, top + cell * t + cell / 2));
  colLabels.forEach((label, s) => {
    ctx.save();
    ctx.translate(left + cell * s + cell / 2, top - 6);
    ctx.rotate(-Math.PI / 3);
    ctx.textAlign = "left";
    ctx.fillText(label, 0, 0);
    ctx.restore();
  });
  matrix.forEach((row, t) => row.forEach((w, s) => {
    const shade = Math.round(255 * (1 - w));  // white = 0, dark blue = 1
    ctx.fillStyle = `rgb(${shade}, ${shade}, 255)`;
    ctx.fillRect(left + cell * s, top + cell * t, cell - 1, cell - 1);
  }));
}

function meanOverHeads(heads) {
  return heads[0].map((row, t) => row.map((_, s) => heads.reduce((sum, h) => sum + h[t][s], 0) / heads.length));
}

function box(root) {
  const models = root.dataset.models.split(",");
  root.innerHTML = `
    <div class="ct-row"><label>Model <select class="ct-model">${models.map((n) => `<option value="${n}">${n}</option>`).join("")}</select></label></div>
    <div class="ct-row"><input class="ct-input" type="text" size="60" aria-label="sentence to translate">
      <button class="ct-go" type="button">Translate</button></div>
    <p class="ct-status" role="status"></p>
    <p class="ct-output" lang=""></p>
    <div class="ct-row ct-controls" hidden><label>Layer <select class="ct-layer"></select></label>
      <label>Head <select class="ct-head"></select></label></div>
    <canvas class="ct-map" hidden></canvas>
    <p class="ct-caption" hidden>Cross-attention of the translation: one row per output piece (the row of the
      decoder step that produced it), one column per source piece; darker is more weight.</p>`;
  const $ = (selector) => root.querySelector(selector);
  const samples = JSON.parse(root.dataset.samples || "{}");
  const mb = (bytes) => (bytes / 1e6).toFixed(1);
  const describe = async () => {
    const name = $(".ct-model").value;
    $(".ct-input").value = samples[name] || "";
    if (loaded.has(name)) return;
    try {
      const sizes = (await metadata(name)).download_bytes;
      $(".ct-status").textContent = `The model runs in this page, in your browser: nothing you type is sent anywhere. ` +
        `The first translation downloads it (${mb(sizes.model)} MB) and, once for both models, the runtime (${mb(sizes.runtime)} MB).`;
    } catch (error) {
      $(".ct-status").textContent = `The model files are missing from this build of the book (${error.message}).`;
    }
  };
  if (location.protocol === "file:") {  // (Chromium does not even run this module from disk; the page's own text says so)
    $(".ct-status").textContent = "This translator runs only when the book is served over HTTP: run " +
      "`python -m http.server -d _build/html` in the repository and open http://localhost:8000/ (opened from disk, the browser refuses to read the model files).";
    $(".ct-go").disabled = true;
    return;
  }
  $(".ct-model").addEventListener("change", describe);
  describe();
  let result = null;
  const draw = () => {
    const layer = Number($(".ct-layer").value), head = $(".ct-head").value;
    const heads = result.attention[layer];
    heatmap($(".ct-map"), head === "mean" ? meanOverHeads(heads) : heads[Number(head)], result.targetPieces, result.sourcePieces);
    const total = heads.flat(2).reduce((a, b) => a + b * b, 0);
    $(".ct-map").dataset.fingerprint = total.toFixed(6);
  };
  $(".ct-layer").addEventListener("change", draw);
  $(".ct-head").addEventListener("change", draw);
  $(".ct-go").addEventListener("click", async () => {
    const name = $(".ct-model").value;
    $(".ct-go").disabled = true;
    $(".ct-status").textContent = loaded.has(name) ? "Translating…" : "Loading the model into this page (once)…";
    try {
      result = await translate(name, $(".ct-input").value);
      const meta = (await load(name)).meta;
      $(".ct-output").textContent = result.translation;
      $(".ct-output").lang = meta.tgt_lang;
      $(".ct-status").textContent = `${meta.src_lang} → ${meta.tgt_lang}, greedy, ${result.seconds.toFixed(2)} s in this browser.`;
      if (result.attention.length) {
        $(".ct-layer").innerHTML = result.attention.map((_, l) => `<option value="${l}">${l}</option>`).join("");
        $(".ct-layer").value = String(result.attention.length - 1);
        $(".ct-head").innerHTML = `<option value="mean">mean</option>` + result.attention[0].map((_, h) => `<option value="${h}">${h}</option>`).join("");
        $(".ct-controls").hidden = false;
        $(".ct-map").hidden = false;
        $(".ct-caption").hidden = false;
        draw();
      }
      root.dataset.state = "done";
    } catch (error) {
      $(".ct-status").textContent = `The translator failed: ${error.message}`;
      root.dataset.state = "failed";
      throw error;
    } finally {
      $(".ct-go").disabled = false;
    }
  });
  root.dataset.state = "ready";
}

document.querySelectorAll(".course-translator").forEach(box);
