#!/usr/bin/env python3
"""evidence_resign.py: rewrites an evidence bundle as a lying exporter would,
then fixes its manifest, SHA256SUMS and both signatures with the real key, so
that only sandtrail's deeper checks (scope, proofs, completeness) can catch it.

  evidence_resign.py drop  BUNDLE KEY          drop the last event and its proof
  evidence_resign.py swap  BUNDLE KEY FIXTURE  put another run's event on line 1
  evidence_resign.py proof BUNDLE KEY          change one step of the first proof
  evidence_resign.py checkpoint BUNDLE KEY     lower a signed count of a checkpoint
"""
import hashlib
import json
import os
import subprocess
import sys


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def sign(key, path):
    subprocess.run(["openssl", "pkeyutl", "-sign", "-inkey", key, "-rawin",
                    "-in", path, "-out", path + ".sig"], check=True)


def reseal(d, key):
    man_path = os.path.join(d, "manifest.json")
    with open(man_path) as f:
        man = json.load(f)
    for name in man["files"]:
        man["files"][name] = sha(os.path.join(d, name))
    with open(man_path, "w") as f:
        f.write(json.dumps(man, indent=2) + "\n")
    sign(key, man_path)
    sums = "".join("%s  %s\n" % (h, n) for n, h in man["files"].items())
    sums += "%s  manifest.json\n" % sha(man_path)
    with open(os.path.join(d, "SHA256SUMS"), "w") as f:
        f.write(sums)
    sign(key, os.path.join(d, "SHA256SUMS"))


def main():
    op, d, key = sys.argv[1], sys.argv[2], sys.argv[3]
    ev_path, pr_path = os.path.join(d, "events.ndjson"), os.path.join(d, "proofs.json")
    with open(ev_path) as f:
        lines = f.read().split("\n")[:-1]
    with open(pr_path) as f:
        proofs = json.load(f)
    if op == "drop":
        lines.pop()
        proofs = [p for p in proofs if p["line"] <= len(lines)]
    elif op == "swap":
        other = []
        with open(sys.argv[4]) as f:
            for l in f:
                try:
                    if json.loads(l)["run_id"] != "run-burst":
                        other.append(l.rstrip("\n"))
                except (ValueError, KeyError):
                    pass
        lines[0] = other[0]
        for p in proofs:
            if p["line"] == 1:
                p["event_id"] = json.loads(other[0])["event_id"]
    elif op == "checkpoint":
        cp_path = os.path.join(d, "checkpoints.json")
        with open(cp_path) as f:
            cps = json.load(f)
        body = json.loads(cps[0]["body"])
        body["runs"][0][2] -= 1
        cps[0]["body"] = json.dumps(body, separators=(",", ":"))
        with open(cp_path, "w") as f:
            json.dump(cps, f, indent=2)
    elif op == "proof":
        p = proofs[0]
        step = p["path"][0]
        p["path"][0] = ("0" if step[0] != "0" else "1") + step[1:]
    with open(ev_path, "w") as f:
        f.write("".join(l + "\n" for l in lines))
    with open(pr_path, "w") as f:
        json.dump(proofs, f, indent=2)
    reseal(d, key)


if __name__ == "__main__":
    main()
