#!/usr/bin/env bash
# Rebuild the JavaScript that the book serves for its in-browser translator (book/assets/onnxruntime-web and
# book/assets/sentencepiece) from the npm packages pinned in package-lock.json. Needs Node.js and npm.
#   bash tools/browser_vendor/build.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
assets="$here/../../book/assets"
cd "$here"
npm ci --no-audit --no-fund
ort=node_modules/onnxruntime-web/dist
cp "$ort/ort.wasm.min.mjs" "$ort/ort-wasm-simd-threaded.mjs" "$ort/ort-wasm-simd-threaded.wasm" "$assets/onnxruntime-web/"
# sentencepiece-js is an ES module for Node (it imports fs, buffer and module): bundle its processor for the
# browser, with those three replaced by the stubs in shim/ (its WebAssembly is inside the file, base64).
npx esbuild entry.js --bundle --format=esm --platform=browser --minify \
  --alias:fs=./shim/fs.js --alias:buffer=./shim/buffer.js --alias:module=./shim/module.js \
  --outfile="$assets/sentencepiece/sentencepiece.mjs"
cp node_modules/@sctg/sentencepiece-js/LICENSE "$assets/sentencepiece/LICENSE"
(cd "$assets" && sha256sum onnxruntime-web/*.mjs onnxruntime-web/*.wasm sentencepiece/*.mjs)
