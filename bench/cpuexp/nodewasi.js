// Runs a WASI preview 1 CPython build on Node.js's WASI (V8), for cpuexp's
// v8 variant: node nodewasi.js FILE CODE
"use strict";
const { WASI } = require("node:wasi");
const fs = require("node:fs");
const [file, code] = process.argv.slice(2);
const wasi = new WASI({ version: "preview1", args: ["python", "-B", "-c", code], env: {}, returnOnExit: true });
const mod = new WebAssembly.Module(fs.readFileSync(file));
const inst = new WebAssembly.Instance(mod, { wasi_snapshot_preview1: wasi.wasiImport });
process.exitCode = wasi.start(inst);
