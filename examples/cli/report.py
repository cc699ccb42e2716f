# Reads the mounted input (/in), fills the template copied in with --file,
# and keeps a run counter in the volume (/data).
import os

runs = int(open("/data/runs").read()) + 1 if os.path.exists("/data/runs") else 1
open("/data/runs", "w").write(str(runs))
template = open("/work/report.tpl").read()
print(template.format(files=sorted(os.listdir("/in")), runs=runs))
