// Node's `Buffer`: used only by the library's base64 loader, which the book does not call.
export const Buffer = { from() { throw new Error("Buffer is not available in the browser: pass a Uint8Array"); } };
