# Runs in the sandbox: python -c HARNESS NAME, the cases' arguments as a
# JSON list on stdin. Writes one outcome per case to /work/outcomes.json.
import json
import sys

sys.path.insert(0, "/work")
import generated

fn = getattr(generated, sys.argv[1])
outcomes = []
for args in json.load(sys.stdin):
    try:
        got = fn(*args)
        json.dumps(got)  # a result JSON cannot hold fails its case only
        outcomes.append({"got": got})
    except Exception as e:
        outcomes.append({"error": f"{type(e).__name__}: {e}"})
with open("/work/outcomes.json", "w") as f:
    json.dump(outcomes, f, ensure_ascii=False)
