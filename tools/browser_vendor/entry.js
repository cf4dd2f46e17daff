// The one class the book's translator uses; esbuild drops the rest of the package (its bundled models).
export { SentencePieceProcessor } from "@sctg/sentencepiece-js";
