#!/usr/bin/env python3
"""Generates the collector benchmark's input: NDJSON, schema sandtrail.event.v1.

  gen_mixed.py EVENTS OUT.ndjson [SEED]

EVENTS native events as the three kinds of source write them, in event-time
order: proxy requests (Squid and Smokescreen, some denied, some with request
headers), sandbox exec, file_read, file_write, commit and upload, and broker
token_issue, token_use, token_deny, token_revoke and token_expire. Lines
average about 400 bytes. About 5% carry a token shape where agents leak them
(a command line, a URL, an Authorization header, a file written, a commit
message): GitHub ghp_/gho_/github_pat_, AWS AKIA, Slack xoxb-,
a JWT, OpenAI/Anthropic sk- keys, GitLab glpat-, Google AIza. The rest carry
the usual near misses (https:// URLs, "Bearer realm", "secret" in prose) that
make the redactor look and find nothing. Every line is a valid event: the
collector accepts all of them. The same SEED (default 1) gives the same
bytes. A summary goes to stderr.
"""
import json
import random
import sys

ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
UPPER_DIGIT = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
B64URL = ALNUM + "-_"
HEX = "0123456789abcdef"

# host -> paths an agent asks it for
SITES = {
    "pypi.org": ["/simple/requests/", "/simple/numpy/", "/pypi/pytest/json"],
    "files.pythonhosted.org": ["/packages/3a/1f/requests-2.31.0-py3-none-any.whl"],
    "registry.npmjs.org": ["/lodash/-/lodash-4.17.21.tgz", "/react", "/@types%2fnode"],
    "github.com": ["/acme/widgets.git/info/refs?service=git-upload-pack", "/acme/widgets/archive/main.zip"],
    "api.github.com": ["/repos/acme/widgets/pulls?state=open&per_page=50",
                       "/repos/acme/widgets/contents/README.md", "/user"],
    "objects.githubusercontent.com": ["/github-production-release-asset-2e65be/1234/abcd"],
    "crates.io": ["/api/v1/crates/serde/1.0.193/download"],
    "proxy.golang.org": ["/github.com/stretchr/testify/@v/v1.8.4.mod"],
    "deb.debian.org": ["/debian/dists/bookworm/InRelease"],
    "api.openai.com": ["/v1/chat/completions", "/v1/embeddings"],
    "api.anthropic.com": ["/v1/messages"],
    "slack.com": ["/api/chat.postMessage"],
    "hooks.slack.com": ["/services/T0000/B0000/XXXXXXXX"],
    "s3.amazonaws.com": ["/acme-artifacts/runs/", "/acme-artifacts/cache/pip.tar"],
    "sts.amazonaws.com": ["/?Action=GetCallerIdentity&Version=2011-06-15"],
    "gitlab.com": ["/api/v4/projects/42/repository/files/README.md"],
    "paste.example.net": ["/", "/upload"],
    "transfer.sh": ["/upload"],
    "webhook.site": ["/6f1c2b9e-0d4a-4d6e-9a3b-1f2e3d4c5b6a"],
    "169.254.169.254": ["/latest/meta-data/iam/security-credentials/"],
    "10.0.3.7": ["/metrics"],
    "docs.python.org": ["/3/library/json.html"],
    "stackoverflow.com": ["/questions/2310270/python-subprocess"],
}
HOSTS = sorted(SITES)
DENIED = {"paste.example.net", "transfer.sh", "webhook.site", "169.254.169.254",
          "10.0.3.7", "hooks.slack.com"}
AGENTS = ["pip/23.3.1 {\"python\":\"3.11.7\"}", "npm/10.2.4 node/v20.10.0 linux x64",
          "curl/7.88.1", "git/2.39.2", "cargo 1.74.0 (ecb9851af 2023-10-18)",
          "Go-http-client/1.1", "python-requests/2.31.0", "aws-cli/2.15.0 Python/3.11.6"]
COMMANDS = [
    "pytest -q tests/test_{m}.py -x --maxfail=1",
    "python -m pip install -r requirements.txt --index-url https://pypi.org/simple",
    "npm ci --no-audit --prefer-offline",
    "git status --porcelain=v1 --branch",
    "git diff --stat HEAD~1 -- src/{m}.py",
    "git fetch origin main --depth=50",
    "rg -n \"def {m}\" src/ tests/",
    "ls -la /work/src/{m}",
    "cargo test --release -p {m} -- --nocapture",
    "make -j2 check",
    "curl -sSfL https://raw.githubusercontent.com/acme/widgets/main/scripts/{m}.sh -o /tmp/{m}.sh",
    "go test ./internal/{m}/... -run TestParse -count=1",
    "sed -n 1,120p src/{m}.py",
    "docker build -t widgets:{m} .",
    "aws s3 ls s3://acme-artifacts/{m}/ --region eu-west-1",
]
MODULES = ["client", "retry", "config", "parser", "auth", "cache", "router", "models",
           "storage", "cli", "metrics", "backoff", "tokens", "upload", "session"]
CODE = [
    "import os\nimport json\n\n\ndef load_{m}(path):\n    with open(path) as f:\n        return json.load(f)\n",
    "def retry(fn, attempts=5, delay=0.2):\n    for i in range(attempts):\n        try:\n            return fn()\n        except IOError:\n            time.sleep(delay * 2 ** i)\n    raise RuntimeError(\"gave up\")\n",
    "class {M}Client:\n    \"\"\"Thin wrapper; the secret comes from the environment, never from code.\"\"\"\n\n    def __init__(self, base_url=\"https://api.example.com\"):\n        self.base_url = base_url\n",
    "# {m}\n\nRun `make check` before pushing. Requests use the Bearer realm of the API gateway.\n",
    "export function {m}(items) {{\n  return items.filter((x) => x.enabled).map((x) => x.id);\n}}\n",
]
COMMIT_MSGS = ["Fix retry loop in {m} client", "Add tests for {m} parser edge cases",
               "Bump dependencies; regenerate lockfile", "Refactor {m}: split config loading",
               "Document the {m} module and its settings"]
SCOPES = ["repo:read", "repo:write", "packages:read", "packages:write", "issues:write",
          "s3:GetObject", "s3:PutObject", "chat:write"]
AUDIENCES = ["github.com", "gitlab.com", "aws", "slack.com", "registry.npmjs.org"]


def rand(rnd, alphabet, n):
    return "".join(rnd.choice(alphabet) for _ in range(n))


def token(rnd):
    """One token shape the collector's redactor knows, and its rule name."""
    k = rnd.randrange(10)
    if k == 0:
        return "ghp_" + rand(rnd, ALNUM, 36), "github_token"
    if k == 1:
        return "github_pat_" + rand(rnd, ALNUM + "_", 82), "github_pat"
    if k == 2:
        return "AKIA" + rand(rnd, UPPER_DIGIT, 16), "aws_access_key"
    if k == 3:
        return "xoxb-%d-%d-%s" % (rnd.randrange(10**11, 10**12), rnd.randrange(10**12, 10**13),
                                  rand(rnd, ALNUM, 24)), "slack_token"
    if k == 4:
        return ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhZ2VudC0" + rand(rnd, B64URL, 40)
                + "." + rand(rnd, B64URL, 43)), "jwt"
    if k == 5:
        return "sk-proj-" + rand(rnd, B64URL, 48) + "A1", "openai_key"
    if k == 6:
        return "sk-ant-api03-" + rand(rnd, B64URL, 80) + "AA", "anthropic_key"
    if k == 7:
        return "glpat-" + rand(rnd, B64URL, 20), "gitlab_token"
    if k == 8:
        return "AIza" + rand(rnd, B64URL, 35), "google_api_key"
    return "gho_" + rand(rnd, ALNUM, 36), "github_token"


def fmt_ts(t):
    # event time from 2026-11-29T10:00:00Z on, without datetime's cost per line
    day = t // 86400
    s = t % 86400
    us = int(round((s - int(s)) * 1e6))
    s = int(s)
    if us == 1000000:
        s, us = s + 1, 0
    return "2026-11-%02dT%02d:%02d:%02d.%06dZ" % (29 + day, s // 3600, s % 3600 // 60, s % 60, us)


class Gen:
    def __init__(self, seed):
        self.rnd = random.Random(seed)
        self.leaks = {}

    def leak(self):
        tok, rule = token(self.rnd)
        self.leaks[rule] = self.leaks.get(rule, 0) + 1
        return tok

    def base(self, i, t, kind, name, typ, run, platform=None):
        rnd = self.rnd
        src = {"kind": kind, "name": name}
        if platform:
            src["platform"] = platform
        ev = {"schema": "sandtrail.event.v1",
              "event_id": "%s-%x" % (name, i),
              "ts": fmt_ts(t), "source": src,
              "task_id": "T-%05d" % (run // 4), "run_id": "run-%06d" % run}
        if rnd.random() < 0.6:
            ev["trace_id"] = rand(rnd, HEX, 32)
        ev["type"] = typ
        return ev

    def request(self, i, t, run, secret):
        rnd = self.rnd
        squid = rnd.random() < 0.7
        host = rnd.choice(HOSTS)
        deny = host in DENIED and rnd.random() < 0.8
        ev = self.base(i, t, "proxy", "squid-egress" if squid else "smokescreen-1", "request",
                       run, "squid" if squid else "smokescreen")
        path = rnd.choice(SITES[host])
        method = "CONNECT" if deny and squid else rnd.choice(["GET", "GET", "GET", "POST", "HEAD"])
        if deny:
            ev["decision"] = "deny"
            ev["reason"] = "not_in_allowlist" if squid else "Egress denied: host not in allowlist"
        attrs = {"method": method, "host": host, "port": 443 if rnd.random() < 0.9 else 80,
                 "path": path, "status": 403 if deny else rnd.choice([200, 200, 200, 304, 404]),
                 "bytes_out": rnd.randrange(200, 4000), "bytes_in": 0 if deny else rnd.randrange(300, 900000),
                 "dst_ip": "" if deny else "%d.%d.%d.%d" % (rnd.randrange(1, 224), rnd.randrange(256),
                                                           rnd.randrange(256), rnd.randrange(1, 255))}
        if rnd.random() < 0.5:
            attrs["user_agent"] = rnd.choice(AGENTS)
        if secret:
            tok = self.leak()
            where = rnd.randrange(3)
            if where == 0:
                attrs["headers"] = {"Authorization": "Bearer " + tok, "Accept": "application/json"}
            elif where == 1:
                attrs["path"] = path.split("?")[0] + "?token=" + tok
            else:
                attrs["url"] = "https://x-access-token:%s@%s%s" % (tok, host, path)
        elif rnd.random() < 0.15:
            attrs["headers"] = {"Accept": "application/json", "WWW-Authenticate": "Bearer realm=\"api\""}
        ev["attrs"] = attrs
        return ev

    def exec_(self, i, t, run, secret):
        rnd = self.rnd
        m = rnd.choice(MODULES)
        cmd = rnd.choice(COMMANDS).format(m=m)
        if secret:
            tok = self.leak()
            cmd = rnd.choice([
                "curl -sS -H \"Authorization: token {t}\" https://api.github.com/repos/acme/widgets/issues",
                "git clone https://oauth2:{t}@github.com/acme/widgets.git /work/widgets",
                "export API_KEY={t} && python scripts/{m}.py --dry-run",
                "echo {t} | docker login ghcr.io -u agent --password-stdin",
            ]).format(t=tok, m=m)
        ev = self.base(i, t, "sandbox", "sbx-%d" % (run % 16), "exec", run, "srt-linux")
        ev["attrs"] = {"command": cmd, "exit_code": rnd.choice([0, 0, 0, 0, 1, 2]),
                       "cwd": "/work/" + rnd.choice(["", "src", "widgets", "frontend"]),
                       "duration_ms": rnd.randrange(3, 90000)}
        return ev

    def file_write(self, i, t, run, secret):
        rnd = self.rnd
        m = rnd.choice(MODULES)
        content = rnd.choice(CODE).format(m=m, M=m.capitalize())
        if secret:
            tok = self.leak()
            content = rnd.choice(["API_TOKEN = \"{t}\"\n", "[default]\ntoken = {t}\n",
                                  "SLACK_BOT_TOKEN={t}\n"]).format(t=tok) + content[:120]
        ev = self.base(i, t, "sandbox", "sbx-%d" % (run % 16), "file_write", run)
        ev["attrs"] = {"path": "/work/src/%s.py" % m, "bytes": len(content), "mode": "0644"}
        ev["content"] = content
        return ev

    def file_read(self, i, t, run, secret):
        rnd = self.rnd
        m = rnd.choice(MODULES)
        ev = self.base(i, t, "sandbox", "sbx-%d" % (run % 16), "file_read", run)
        ev["attrs"] = {"path": rnd.choice(["/work/src/%s.py", "/work/tests/test_%s.py",
                                           "/work/docs/%s.md", "/home/agent/.config/%s.toml"]) % m,
                       "bytes": rnd.randrange(100, 60000)}
        return ev

    def commit(self, i, t, run, secret):
        rnd = self.rnd
        m = rnd.choice(MODULES)
        msg = rnd.choice(COMMIT_MSGS).format(m=m)
        if secret:
            msg += "\n\nTested against staging with key " + self.leak()
        ev = self.base(i, t, "sandbox", "sbx-%d" % (run % 16), "commit", run)
        ev["attrs"] = {"branch": "agent/%s-%d" % (m, run), "sha": rand(rnd, HEX, 40),
                       "files_changed": rnd.randrange(1, 12)}
        ev["content"] = msg
        return ev

    def upload(self, i, t, run, secret):
        rnd = self.rnd
        ev = self.base(i, t, "sandbox", "sbx-%d" % (run % 16), "upload", run)
        ev["attrs"] = {"artifact": "dist/widgets-%d.tar.gz" % run, "bytes": rnd.randrange(10**4, 10**8),
                       "destination": "s3://acme-artifacts/runs/%d/" % run}
        return ev

    def token_issue(self, i, t, run, secret):
        rnd = self.rnd
        ev = self.base(i, t, "broker", "vault-prod", "token_issue", run, "vault")
        ev["identity"] = {"subject": "agent:T-%05d" % (run // 4),
                          "credential_id": "hmac-sha256:" + rand(rnd, HEX, 16),
                          "scopes": rnd.sample(SCOPES, rnd.randrange(1, 4)),
                          "audience": rnd.choice(AUDIENCES)}
        ev["attrs"] = {"expires_at": fmt_ts(t + 3600), "ttl_s": 3600, "policy": "sandbox-broker"}
        return ev

    def token_use(self, i, t, run, secret):
        rnd = self.rnd
        ev = self.base(i, t, "broker", "vault-prod", "token_use", run, "vault")
        ev["identity"] = {"credential_id": "hmac-sha256:" + rand(rnd, HEX, 16)}
        ev["attrs"] = {"operation": rnd.choice(SCOPES), "audience": rnd.choice(AUDIENCES),
                       "remote_addr": "10.0.%d.%d" % (rnd.randrange(256), rnd.randrange(1, 255))}
        return ev

    def token_deny(self, i, t, run, secret):
        rnd = self.rnd
        ev = self.base(i, t, "broker", "vault-prod", "token_deny", run, "vault")
        ev["decision"] = "deny"
        ev["reason"] = "permission denied"
        ev["attrs"] = {"requested_scope": rnd.choice(["admin:org", "repo:delete", "s3:*"]),
                       "requested_audience": rnd.choice(AUDIENCES)}
        return ev

    def token_end(self, i, t, run, secret):
        rnd = self.rnd
        typ = "token_revoke" if rnd.random() < 0.6 else "token_expire"
        ev = self.base(i, t, "broker", "vault-prod", typ, run, "vault")
        ev["identity"] = {"credential_id": "hmac-sha256:" + rand(rnd, HEX, 16)}
        return ev


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: gen_mixed.py EVENTS OUT.ndjson [SEED]")
    n, out = int(sys.argv[1]), sys.argv[2]
    g = Gen(int(sys.argv[3]) if len(sys.argv) == 4 else 1)
    rnd = g.rnd
    # share of each type in a day of agent runs, and whether a leak fits it
    mix = [(g.request, 0.40), (g.exec_, 0.24), (g.file_write, 0.12), (g.file_read, 0.08),
           (g.commit, 0.02), (g.upload, 0.01), (g.token_issue, 0.04), (g.token_use, 0.06),
           (g.token_deny, 0.015), (g.token_end, 0.015)]
    leaky = {g.request, g.exec_, g.file_write, g.commit}
    # ~5% of all lines carry a token: the leaky types get all of it
    leak_p = 0.05 / sum(p for f, p in mix if f in leaky)
    cum, acc = [], 0.0
    for f, p in mix:
        acc += p
        cum.append((acc, f))
    t = 36000.0  # 10:00:00 on the first day
    runs = max(1, n // 200)
    total = 0
    counts = {}
    with open(out, "w", buffering=1 << 20) as fp:
        for i in range(n):
            t += rnd.expovariate(n / 21600.0)  # n events over about six hours
            x = rnd.random()
            f = next(f for c, f in cum if x < c) if x < acc else cum[-1][1]
            secret = f in leaky and rnd.random() < leak_p
            ev = f(i, t, rnd.randrange(runs), secret)
            line = json.dumps(ev, separators=(",", ":")) + "\n"
            total += len(line)
            counts[ev["type"]] = counts.get(ev["type"], 0) + 1
            fp.write(line)
    leaked = sum(g.leaks.values())
    sys.stderr.write("gen_mixed: %d events, %.0f bytes/line on average, %d (%.1f%%) with a token "
                     "(%s); %s\n" % (n, total / max(n, 1), leaked, 100.0 * leaked / max(n, 1),
                                     " ".join("%s=%d" % kv for kv in sorted(g.leaks.items())),
                                     " ".join("%s=%d" % kv for kv in sorted(counts.items()))))


if __name__ == "__main__":
    main()
