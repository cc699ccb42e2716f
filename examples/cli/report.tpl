Input files: {files}
This volume has seen {runs} run(s).
