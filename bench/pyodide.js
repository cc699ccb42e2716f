// Runs Python in Pyodide on Node.js for `make bench`. PYODIDE_DIR names the
// installed npm package (bench/setup.sh installs it in the cache directory).
//
//	node pyodide.js run CODE     load Pyodide, run CODE, print its output
//	node pyodide.js batch FILE   FILE holds JSON [{"name", "code"}]; each code
//	                             runs in fresh globals after one load; prints
//	                             JSON {name: last line of its output}
"use strict";
const { loadPyodide } = require(require("path").join(process.env.PYODIDE_DIR, "pyodide.js"));

(async () => {
  let out = [];
  const py = await loadPyodide({ stdout: (s) => out.push(s), stderr: (s) => process.stderr.write(s + "\n") });
  const [mode, arg] = process.argv.slice(2);
  if (mode === "run") {
    py.runPython(arg);
    process.stdout.write(out.join("\n") + "\n");
    return;
  }
  const jobs = JSON.parse(require("fs").readFileSync(arg, "utf8"));
  const res = {};
  for (const j of jobs) {
    out = [];
    const globals = py.toPy({});
    py.runPython(j.code, { globals });
    globals.destroy();
    res[j.name] = out[out.length - 1];
  }
  process.stdout.write(JSON.stringify(res) + "\n");
})().catch((e) => { console.error(e); process.exit(1); });
