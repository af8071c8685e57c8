#!/usr/bin/env python3
"""Download one file of a PyPI release (sdist or wheel) through the PyPI JSON API and
check its sha256.  Used for sdists that `pip download` cannot fetch without building
them.  usage: pypi_get.py NAME VERSION sdist|bdist_wheel DESTDIR"""
import hashlib, json, os, subprocess, sys
name, ver, kind, dest = sys.argv[1:5]
meta = json.loads(subprocess.check_output(["curl", "-sfL", "-m", "120", f"https://pypi.org/pypi/{name}/json"]))
f = next(f for f in meta["releases"][ver] if f["packagetype"] == kind)
url = f["url"]
if url.startswith("../../packages/"):          # some mirrors hand out relative links
    url = "https://files.pythonhosted.org/" + url[len("../../"):]
os.makedirs(dest, exist_ok=True)
out = os.path.join(dest, f["filename"])
subprocess.check_call(["curl", "-sfL", "-m", "900", "-o", out, url])
h = hashlib.sha256(open(out, "rb").read()).hexdigest()
if h != f["digests"]["sha256"]:
    sys.exit(f"sha256 mismatch for {out}")
print(out, h)
