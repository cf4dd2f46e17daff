// Node's `fs`: the sentencepiece library reads model files with it only in its Node.js loaders; the book
// passes the model's bytes instead.
export default {};
