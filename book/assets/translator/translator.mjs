// The course's translators, run in the reader's browser: the ONNX files that `transformer export-onnx`
// writes (copied into the book by book/_ext/browser_translator.py), onnxruntime-web for the arithmetic and
// the sentencepiece library (compiled to WebAssembly) for the tokens. Nothing leaves the page: every file
// comes from the book's own _static folder, and none of the runtime is fetched before the first translation.
//
// The decoding is `transformer.decoding.greedy_decode` for one sentence: encode once, then append the most
// probable next token until EOS or 1.5 * S + 10 tokens. The decoder graph has no cache: each step reruns
// the decoder on the whole prefix and returns every layer's cross-attention, so the last step's weights
// are the map of the whole translation.

const STATIC = new URL("../", import.meta.url);  // the book's _static/ folder
const WASM = "onnxruntime-web/ort-wasm-simd-threaded.wasm";

const loaded = new Map();  // model name -> Promise of {meta, encoder, decoder, source, target}
const ready = new Set();  // names of the models whose load has finished
const metas = new Map();  // model name -> Promise of its translator.json
// Bytes received so far, per download ("runtime" and each model's name), for the box's progress bar.
export const received = new Map();

// url -> its bytes, counting them into received[key] as they arrive.
async function fetchBytes(url, key) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  const chunks = [];
  let size = 0;
  const reader = response.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    size += value.length;
    received.set(key, (received.get(key) || 0) + value.length);
  }
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) { bytes.set(chunk, at); at += chunk.length; }
  return bytes;
}

// onnxruntime-web and sentencepiece, imported on first use (about 15 MB that a reader who never
// translates does not download). The WebAssembly, the bulk of it, is fetched here to count its bytes.
let runtimePromise = null;
let runtimeReady = false;
function runtime(meta) {
  if (runtimePromise === null) {
    runtimePromise = (async () => {
      const [ort, sp, wasm] = await Promise.all([
        import("../onnxruntime-web/ort.wasm.min.mjs"),
        import("../sentencepiece/sentencepiece.mjs"),
        fetchBytes(new URL(WASM, STATIC), "runtime"),
      ]);
      ort.env.wasm.wasmPaths = new URL("onnxruntime-web/", STATIC).href;
      ort.env.wasm.wasmBinary = wasm;
      ort.env.wasm.numThreads = 1;  // threads need a cross-origin-isolated page, which a static book is not
      const modules = (meta.download_bytes.runtime || 0) - wasm.length;  // the .mjs files, counted once imported
      received.set("runtime", received.get("runtime") + Math.max(modules, 0));
      runtimeReady = true;
      return { ort, SentencePieceProcessor: sp.SentencePieceProcessor };
    })();
    runtimePromise.catch(() => { runtimePromise = null; received.delete("runtime"); });
  }
  return runtimePromise;
}


async function tokenizer(rt, bytes) {
  const sp = new rt.SentencePieceProcessor();
  await sp._loadModel(await bytes);  // the library's loader that takes bytes (its public ones need Node)
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

export const isLoaded = (name) => ready.has(name);

export function load(name) {
  if (!loaded.has(name)) {
    const base = new URL(`translator-models/${name}/`, STATIC);
    const promise = (async () => {
      const meta = await metadata(name);
      const files = ["encoder.onnx", "decoder.onnx", "source.model", "target.model"]
        .map((f) => fetchBytes(new URL(f, base), name));
      const rt = await runtime(meta);
      const options = { executionProviders: ["wasm"], graphOptimizationLevel: "all" };
      const [encoder, decoder, source, target] = await Promise.all([
        rt.ort.InferenceSession.create(await files[0], options),
        rt.ort.InferenceSession.create(await files[1], options),
        tokenizer(rt, files[2]),
        tokenizer(rt, files[3]),
      ]);
      ready.add(name);
      return { meta, ort: rt.ort, encoder, decoder, source, target };
    })();
    loaded.set(name, promise);
    promise.catch(() => { loaded.delete(name); received.delete(name); });  // a later click tries again
  }
  return loaded.get(name);
}

// What `transformer translate` does to a line before the model sees it: a leading byte-order mark goes
// (engine/cli.py, read_input_lines), then Python's str.strip() (decoding.translate), whose whitespace is
// not JavaScript's (it strips \x1c-\x1f and \x85, and keeps U+FEFF inside a sentence), then NFC
// (search_checks.clean: a letter and a combining mark become the one character the corpora hold).
const PY_SPACE = "\\t\\n\\v\\f\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const PY_STRIP = new RegExp(`^[${PY_SPACE}]+|[${PY_SPACE}]+$`, "g");
export const clean = (sentence) =>
  sentence.replace(/^\ufeff/, "").replace(PY_STRIP, "").normalize("NFC");

// One sentence -> {translation, sourcePieces, targetPieces, attention: [layer][head][t][s], seconds, cut}.
// seconds is the translation alone: the model is loaded first (load(name)), and that time is not counted.
export async function translate(name, sentence) {
  const m = await load(name);
  const started = performance.now();
  const meta = m.meta;
  const text = clean(sentence);
  const ids = (values) => new m.ort.Tensor("int64", BigInt64Array.from(values, BigInt), [1, values.length]);
  let src = m.source.encodeIds(text);
  if (src.length === 0) return { translation: "", sourcePieces: [], targetPieces: [], attention: [], seconds: 0, cut: null };
  // a sentence longer than the model reads is cut to fit, as decoding.translate cuts it (and says so)
  const cut = src.length > meta.max_len ? { tokens: src.length, kept: meta.max_len } : null;
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
    sourcePieces: m.source.encodePieces(text).slice(0, meta.max_len),
    // row t predicts tokens[t]: label it with the piece it produced
    targetPieces: tokens.map((id) => (id === meta.eos_id ? "</s>" : m.target.decodeIds(Int32Array.from([id])) || "▁")),
    attention,
    seconds: (performance.now() - started) / 1000,
    cut,
  };
}

// ---- the box on the page ------------------------------------------------------------------------------

// Chinese in the box is drawn with the font the package ships for its figures (src/transformer/_fonts,
// copied into _static/fonts/ by the build), so it reads the same where the reader has no CJK font. The
// browser fetches it (0.6 MB) only when Chinese is shown.
const CJK = "Course CJK";
if (typeof FontFace !== "undefined") {
  document.fonts.add(new FontFace(CJK, `url(${new URL("fonts/NotoSansCJKsc-course-subset.otf", STATIC).href})`));
}
const fontStack = (lang) => (lang === "zh" ? `"${CJK}", sans-serif` : "sans-serif");

// white (weight 0) to dark blue (weight 1): the map's cells and its colour scale
const colour = (w) => { const shade = Math.round(255 * (1 - Math.min(Math.max(w, 0), 1))); return `rgb(${shade}, ${shade}, 255)`; };
const CELL = 22, LEFT = 90, TOP = 80;

// The map, drawn at the screen's pixel density (crisp on a 2x screen): canvas pixels = CSS pixels * dpr.
function heatmap(canvas, matrix, rowLabels, colLabels, rowLang, colLang) {
  const dpr = window.devicePixelRatio || 1;
  const width = LEFT + CELL * colLabels.length + 10, height = TOP + CELL * rowLabels.length + 10;
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  canvas.style.width = `${width}px`;
  canvas.style.aspectRatio = `${width} / ${height}`;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, width, height);
  ctx.fillStyle = "#222";
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  ctx.font = `12px ${fontStack(rowLang)}`;
  rowLabels.forEach((label, t) => ctx.fillText(label, LEFT - 6, TOP + CELL * t + CELL / 2));
  ctx.font = `12px ${fontStack(colLang)}`;
  colLabels.forEach((label, s) => {
    ctx.save();
    ctx.translate(LEFT + CELL * s + CELL / 2, TOP - 6);
    ctx.rotate(-Math.PI / 3);
    ctx.textAlign = "left";
    ctx.fillText(label, 0, 0);
    ctx.restore();
  });
  matrix.forEach((row, t) => row.forEach((w, s) => {
    ctx.fillStyle = colour(w);
    ctx.fillRect(LEFT + CELL * s, TOP + CELL * t, CELL - 1, CELL - 1);
  }));
}

function meanOverHeads(heads) {
  return heads[0].map((row, t) => row.map((_, s) => heads.reduce((sum, h) => sum + h[t][s], 0) / heads.length));
}

const TICKS = [0, 0.25, 0.5, 0.75, 1];

// A model's name for a reader: its two languages, from the codes in its translator.json
// ("de", "en" -> "German → English"); the folder's name where the browser cannot name a language.
const languages = typeof Intl.DisplayNames === "function" ? new Intl.DisplayNames(["en"], { type: "language" }) : null;
const language = (code) => { try { return (languages && languages.of(code)) || code; } catch { return code; } };
export const title = (meta) => `${language(meta.src_lang)} → ${language(meta.tgt_lang)}`;

function box(root) {
  const models = root.dataset.models.split(",");
  root.innerHTML = `
    <div class="ct-row"><label>Model <select class="ct-model">${models.map((n) => `<option value="${n}">${n}</option>`).join("")}</select></label></div>
    <div class="ct-row"><input class="ct-input" type="text" size="60" aria-label="sentence to translate (Enter translates)" enterkeyhint="go">
      <button class="ct-go" type="button">Translate</button></div>
    <div class="ct-loading" hidden><progress class="ct-progress" max="1" value="0"></progress>
      <span class="ct-progress-text"></span></div>
    <p class="ct-status" role="status"></p>
    <p class="ct-output" lang=""></p>
    <div class="ct-row ct-controls" hidden><label>Layer <select class="ct-layer"></select></label>
      <label>Head <select class="ct-head"></select></label></div>
    <div class="ct-figure" hidden>
      <canvas class="ct-map"></canvas>
      <div class="ct-scale" aria-label="colour scale of the attention weights">
        <span class="ct-scale-title">attention weight</span>
        <span class="ct-scale-bar" style="background: linear-gradient(to right, ${TICKS.map(colour).join(", ")})"></span>
        <span class="ct-scale-ticks">${TICKS.map((w) => `<span>${w}</span>`).join("")}</span>
      </div>
      <p class="ct-caption">Cross-attention of the translation: one row per output piece (the row of the
        decoder step that produced it), one column per source piece; each row's weights add up to 1, and
        darker is more weight. Point at a cell for its value.</p>
    </div>`;
  const $ = (selector) => root.querySelector(selector);
  for (const option of $(".ct-model").options) {  // the menu reads "German → English", not a folder's name
    option.title = option.value;
    metadata(option.value).then((meta) => { option.textContent = title(meta); }, () => null);
  }
  const samples = JSON.parse(root.dataset.samples || "{}");
  const mb = (bytes) => (bytes / 1e6).toFixed(1);
  let result = null;  // the translation on show, with .model and .meta, or null
  let request = 0;  // bumped by each translation and each change of model: a stale answer is dropped

  const clear = () => {
    result = null;
    $(".ct-output").textContent = "";
    $(".ct-output").removeAttribute("data-model");
    $(".ct-controls").hidden = true;
    $(".ct-figure").hidden = true;
    $(".ct-layer").innerHTML = "";
    $(".ct-head").innerHTML = "";
  };
  const describe = async () => {
    const name = $(".ct-model").value;
    $(".ct-input").value = samples[name] || "";
    if (isLoaded(name)) { $(".ct-status").textContent = ""; return; }
    try {
      const sizes = (await metadata(name)).download_bytes;
      if (name !== $(".ct-model").value) return;
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

  const draw = () => {
    if (result === null || !result.attention.length) return;
    const layer = Number($(".ct-layer").value), head = $(".ct-head").value;
    const heads = result.attention[layer];
    if (heads === undefined) return;
    const matrix = head === "mean" ? meanOverHeads(heads) : heads[Number(head)];
    const canvas = $(".ct-map");
    heatmap(canvas, matrix, result.targetPieces, result.sourcePieces, result.meta.tgt_lang, result.meta.src_lang);
    canvas.matrix = matrix;
    const total = heads.flat(2).reduce((a, b) => a + b * b, 0);
    canvas.dataset.fingerprint = total.toFixed(6);
  };
  $(".ct-map").addEventListener("mousemove", (event) => {
    const canvas = event.currentTarget;
    if (result === null || !canvas.matrix) return;
    const scale = canvas.getBoundingClientRect().width / parseFloat(canvas.style.width);
    const s = Math.floor(((event.offsetX / scale) - LEFT) / CELL), t = Math.floor(((event.offsetY / scale) - TOP) / CELL);
    const w = canvas.matrix[t] && canvas.matrix[t][s];
    canvas.title = w === undefined ? "" : `${result.targetPieces[t]} ← ${result.sourcePieces[s]}: ${w.toFixed(3)}`;
  });
  $(".ct-layer").addEventListener("change", draw);
  $(".ct-head").addEventListener("change", draw);
  $(".ct-model").addEventListener("change", () => {
    request += 1;  // a translation still under way belongs to the other model: its answer is dropped
    clear();
    $(".ct-loading").hidden = true;
    $(".ct-go").disabled = false;
    root.dataset.state = "ready";
    describe();
  });

  // the progress bar: bytes received of the bytes this load needs, read every 100 ms
  const watch = async (name, mine) => {
    const meta = await metadata(name);
    const runtimeNeeded = !runtimeReady;
    const total = meta.download_bytes.model + (runtimeNeeded ? meta.download_bytes.runtime : 0);
    $(".ct-progress").max = total;
    $(".ct-loading").hidden = false;
    const tick = () => {
      const got = Math.min((received.get(name) || 0) + (runtimeNeeded ? received.get("runtime") || 0 : 0), total);
      $(".ct-progress").value = got;
      $(".ct-progress-text").textContent = `${mb(got)} of ${mb(total)} MB`;
    };
    tick();
    const timer = setInterval(tick, 100);
    try { await load(name); } catch (error) { /* the translation reports it */ } finally {
      clearInterval(timer);
      if (mine === request) $(".ct-loading").hidden = true;
    }
  };

  const go = async () => {
    const name = $(".ct-model").value;
    const mine = ++request;
    if (clean($(".ct-input").value) === "") {  // nothing to translate: nothing to download either
      clear();
      $(".ct-status").textContent = "Type a sentence to translate.";
      root.dataset.state = "done";
      return;
    }
    $(".ct-go").disabled = true;
    root.dataset.state = "busy";
    let loadSeconds = null;
    try {
      if (!isLoaded(name)) {
        $(".ct-status").textContent = "Loading the model into this page (once)…";
        const started = performance.now();
        await Promise.all([load(name), watch(name, mine)]);
        loadSeconds = (performance.now() - started) / 1000;
        if (mine !== request) return;
      }
      $(".ct-status").textContent = "Translating…";
      const answer = await translate(name, $(".ct-input").value);
      if (mine !== request) return;  // the reader changed the model (or translated again) meanwhile
      clear();
      const meta = (await load(name)).meta;
      if (!answer.attention.length) {
        $(".ct-status").textContent = "Type a sentence to translate.";
        root.dataset.state = "done";
        return;
      }
      result = { ...answer, model: name, meta };
      $(".ct-output").textContent = answer.translation;
      $(".ct-output").lang = meta.tgt_lang;
      $(".ct-output").dataset.model = name;
      const parts = [`${name}: ${meta.src_lang} → ${meta.tgt_lang}, greedy, ${answer.seconds.toFixed(2)} s in this browser`];
      if (loadSeconds !== null) parts.push(`(after ${loadSeconds.toFixed(1)} s to load the model, once)`);
      let status = parts.join(" ") + ".";
      if (answer.cut) {
        status += ` Your sentence has ${answer.cut.tokens} tokens; the model reads at most ${answer.cut.kept}, ` +
          `so only its first ${answer.cut.kept} were translated.`;
      }
      $(".ct-status").textContent = status;
      $(".ct-layer").innerHTML = answer.attention.map((_, l) => `<option value="${l}">${l}</option>`).join("");
      $(".ct-layer").value = String(answer.attention.length - 1);
      $(".ct-head").innerHTML = `<option value="mean">mean</option>` + answer.attention[0].map((_, h) => `<option value="${h}">${h}</option>`).join("");
      $(".ct-controls").hidden = false;
      $(".ct-figure").hidden = false;
      const chinese = [meta.tgt_lang, meta.src_lang].includes("zh");
      if (chinese && document.fonts) {  // the canvas draws with the font only once it is here
        await document.fonts.load(`12px "${CJK}"`, answer.targetPieces.join("") + answer.sourcePieces.join("")).catch(() => null);
        if (mine !== request) return;
      }
      draw();
      root.dataset.state = "done";
    } catch (error) {
      if (mine !== request) return;
      $(".ct-status").textContent = `The translator failed: ${error.message}`;
      root.dataset.state = "failed";
      throw error;
    } finally {
      if (mine === request) $(".ct-go").disabled = false;
    }
  };
  $(".ct-go").addEventListener("click", go);
  $(".ct-input").addEventListener("keydown", (event) => {
    // Enter translates (the input is one line); not while an input method is composing (Chinese, Japanese)
    if (event.key === "Enter" && !event.isComposing && !$(".ct-go").disabled) {
      event.preventDefault();
      go();
    }
  });
  describe();
  root.dataset.state = "ready";
}

document.querySelectorAll(".course-translator").forEach(box);
