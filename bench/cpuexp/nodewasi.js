// Runs a WASI preview 1 CPython build on Node.js's WASI (V8), for cpuexp's
// v8 variants: node nodewasi.js FILE CODE. WASI_ROOT, if set, is mounted at
// /; WASI_ENV holds the guest's environment, one K=V a line.
"use strict";
const { WASI } = require("node:wasi");
const fs = require("node:fs");
const [file, code] = process.argv.slice(2);
const env = {};
for (const kv of (process.env.WASI_ENV || "").split("\n").filter(Boolean)) {
  const i = kv.indexOf("=");
  env[kv.slice(0, i)] = kv.slice(i + 1);
}
const preopens = process.env.WASI_ROOT ? { "/": process.env.WASI_ROOT } : {};
const wasi = new WASI({ version: "preview1", args: ["python", "-B", "-c", code], env, preopens, returnOnExit: true });
const mod = new WebAssembly.Module(fs.readFileSync(file));
const inst = new WebAssembly.Instance(mod, { wasi_snapshot_preview1: wasi.wasiImport });
process.exitCode = wasi.start(inst);
