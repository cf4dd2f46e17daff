// Node's `module`: the sentencepiece bundle imports it only on its Node.js path, never in a browser.
export function createRequire() { throw new Error("createRequire is Node.js only"); }
export default {};
