// Both clients send byte-identical in-pod scripts and compute the same names and activity values: the
// Python client (test/reference.py, run with the repository's venv) answers the same cases.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createInterface } from "node:readline";
import { after, test as nodeTest } from "node:test";
import { fileURLToPath } from "node:url";
import net from "node:net";
import { formatActivity } from "../src/activity.js";
import { MalformedResponse, UnverifiedPod } from "../src/errors.js";
import * as protocol from "../src/generated/protocol.js";
import { contentCodingsReadable, retryDelay, RuntimeTransport } from "../src/transport.js";
import { POD_IDENTITY_AUDIENCE } from "../src/generated/contract.js";
import { ClusterKeys, PodIdentity } from "../src/identity.js";
import { sessionName, threadHash } from "../src/manager.js";
import * as scripts from "../src/scripts.js";
import * as probe from "../src/probe.js";
import * as gnuGrep from "../src/gnu-grep.js";
import * as pyscripts from "../src/pyscripts.js";
import { toSpec } from "../src/sessions.js";
import { PathPolicy, PathRefused } from "../src/paths.js";
import { ClusterSigner } from "../testing/cluster-signer.js";

const repo = fileURLToPath(new URL("../../../", import.meta.url));
const reference = fileURLToPath(new URL("../../test/reference.py", import.meta.url));
const python = process.env.PYTHON ?? (existsSync(`${repo}.venv/bin/python`) ? `${repo}.venv/bin/python` : "python3");

// These cases need the Python client (the other half of each comparison). Where it is absent (the package
// tested on its own, outside the repository) they are skipped, saying so: never passed without comparing.
const withPython = spawnSync(python, ["-c", "import langchain_k8s_client"], { stdio: "ignore" }).status === 0;
const skipped = `no Python with langchain_k8s_client (${python}): set PYTHON to one to compare both clients`;
// The repository's make test sets CROSS_LANGUAGE=required: there a missing Python client fails, not skips.
if (!withPython && process.env.CROSS_LANGUAGE === "required") throw new Error(skipped);
const test = (name: string, fn: () => Promise<void> | void) =>
  withPython ? nodeTest(name, fn) : nodeTest(name, { skip: skipped }, fn);

// One Python process for the whole file (its imports take seconds on a busy machine): a JSON line of
// cases in, a JSON line of answers out.
const child = withPython ? spawn(python, [reference], { stdio: ["pipe", "pipe", "inherit"] }) : undefined;
const lines = child ? createInterface({ input: child.stdout! })[Symbol.asyncIterator]() : undefined;
after(() => child?.stdin!.end());

async function pythonAnswers(cases: unknown[]): Promise<unknown[]> {
  child!.stdin!.write(JSON.stringify(cases) + "\n");
  const line = await lines!.next();
  assert.ok(!line.done, `${python} ${reference} exited (set PYTHON to a python with langchain_k8s_client)`);
  return JSON.parse(line.value as string) as unknown[];
}

const commandsToWrap = ["true", "ls -la /tmp", "echo $$ $PPID", "printf 'a\\nb' | wc -l", "cd /x && exit 3", "echo 'é ü ✓'", "export A=1", ""];
const runners = ["none", "timeout", "python3"] as const;

test("the user-command wrapper is byte-identical for every runner and encoder", async () => {
  const cases: unknown[] = [];
  const ours: unknown[] = [];
  let seq = 0;
  for (const runner of runners) {
    for (const hasBase64 of [true, false]) {
      for (const command of commandsToWrap) {
        seq += 1;
        const o = { timeout: 30 + seq, maxOutput: 1024 * seq, stagingDir: "/home/user/.lkc-staging", cwd: seq % 2 ? "" : "/work dir", runner, hasBase64, capture: "o.abc123", seq, sweep: seq % 3 ? 0 : 32 };
        cases.push({ op: "user_command", args: { command, timeout: o.timeout, max_output: o.maxOutput, staging_dir: o.stagingDir, cwd: o.cwd, runner, has_base64: hasBase64, capture: o.capture, seq, sweep: o.sweep } });
        const w = scripts.userCommand(command, o);
        ours.push({ inline: w.inline(), staged: w.staged(), wrapper: w.wrapper });
      }
    }
  }
  assert.deepEqual(ours, (await pythonAnswers(cases)));
});

test("probe, upload, download and cleanup scripts are byte-identical", async () => {
  const upload: Array<[string, string, string]> = [["/s/up-1", "/tmp/a b", ""], ["/s/up-2", "/tmp/it's", "/tmp"]];
  const download: Array<[string, string]> = [["/tmp/x", ""], ["/tmp/ü y", "/tmp"]];
  const prep = { stagingDir: "/base/.lkc-staging", token: "tok", inlineMax: 524288, inlineBudget: 2097152 };
  const cases = [
    { op: "probe" },
    { op: "upload_finalize", args: { items: upload } },
    { op: "download_prepare", args: { items: download, staging_dir: prep.stagingDir, token: prep.token, inline_max: prep.inlineMax, inline_budget: prep.inlineBudget } },
    { op: "remove", args: { paths: ["/base/.lkc-staging/dn-1", "/base/.lkc-staging/dn 2"] } },
  ];
  const ours = [probe.buildProbe(), scripts.buildUploadFinalize(upload), scripts.buildDownloadPrepare(download, prep), scripts.buildRemove(["/base/.lkc-staging/dn-1", "/base/.lkc-staging/dn 2"])];
  assert.deepEqual(ours, (await pythonAnswers(cases)));
});

test("the pod's addresses in a probe's answer, and which IPs they hold, are the Python client's", async () => {
  const answers = [
    "v4= 10.244.1.17/32 10.244.1.17/32 127.0.0.0/8 127.0.0.1/32\nv6= fd000000000000000000000000000017 00000000000000000000000000000001",
    "v4= 127.0.0.1/8 10.1.2.3/24 garbage 300.1.1.1/32 10.0.0.1/33 1.2.3.4\nv6= fe800000000000000000000100000000 zz 0000000000000000000000000000000 ffff",
    "v4=\nv6= 00000000000000000000000000000001 fe80000000000000a8bbccfffedd0011",
    "v4=\nv6=",
    "",
  ];
  const ips = ["10.244.1.17", "10.244.1.18", "127.5.0.7", "fd00::17", "fd00:0:0::17", "::1", "10.1.2.200", "::ffff:127.0.0.1", "not an ip", "", "fe80::a8bb:ccff:fedd:11"];
  const cases: unknown[] = [];
  const ours: unknown[] = [];
  for (const lines of answers) {
    const stdout = `@LKCP\nbase=/home/user\nhost=pod-a\n${lines}\nwrappers=\n`;
    cases.push({ op: "probe_identity", args: { stdout, ips } });
    const info = probe.parseProbe(stdout);
    ours.push({ hostname: info.hostname, addresses: info.addresses, judged: ips.map((ip) => [probe.showsFamilyOf(info, ip), probe.holds(info, ip)]) });
  }
  assert.deepEqual(ours, await pythonAnswers(cases));
});

test("the python3 programs (ls, edit) are byte-identical, their JSON argument too", async () => {
  const paths = ["/tmp/a", "/tmp/ü ✓/日本", "/it's \"quoted\"\\", "/tab\tnl\n\u007f"];
  const cases: unknown[] = [];
  const ours: unknown[] = [];
  for (const path of paths) {
    cases.push({ op: "ls", args: { path, confine: "" } }, { op: "edit", args: { path, old: "ä\r\n", new: "😀 $x `y`", all: true, confine: "/tmp" } });
    ours.push(pyscripts.buildLs(path, ""), pyscripts.buildEdit(pyscripts.editPayload(path, "ä\r\n", "😀 $x `y`", true, "/tmp")));
  }
  assert.deepEqual(ours, (await pythonAnswers(cases)));
});

test("session names and thread hashes are the Python client's", async () => {
  const threads = ["t1", "Thread 42", "user@example.com/conversation#7", "---", "ÄÖÜ unicode ✓ thread", "x".repeat(200), "UPPER_case.dots", "日本語"];
  const prefixes = ["thread", "t", "my-app"];
  const cases: unknown[] = [];
  const ours: unknown[] = [];
  for (const thread of threads) {
    for (const prefix of prefixes) {
      cases.push({ op: "session_name", args: { thread_id: thread, prefix } });
      ours.push(sessionName(thread, prefix));
    }
    cases.push({ op: "thread_hash", args: { thread_id: thread } });
    ours.push(threadHash(thread));
  }
  assert.deepEqual(ours, (await pythonAnswers(cases)));
});

test("activity values are the Python client's", async () => {
  const at = "2026-03-04T05:06:07.891+00:00";
  const busies = [0, 1, 1.5, 30, 300, 3600, 287.3456789, 0.0001234];
  const cases = busies.map((busy) => ({ op: "activity", args: { at, busy } }));
  const ours = busies.map((busy) => formatActivity(new Date(at), busy));
  assert.deepEqual(ours, (await pythonAnswers(cases)));
  // `%g` prints 1234567 and 0.00001 in exponent form, which the operator's pattern refuses: this client
  // says so instead of sending a report the operator would ignore.
  assert.throws(() => formatActivity(new Date(at), 1234567));
});

test("a create sends the Python client's spec", async () => {
  const cases = [{ op: "to_spec", args: { warm_pool: "pool", ttl: "2h", idle_timeout: "15m", idle_action: "Suspend", env: { A: "1", B: "2" }, labels: { l: "v" }, pod_labels: { "sandbox.users.io/x": "y" }, fork_from: "src" } }];
  const ours = [toSpec({ warmPool: "pool", ttl: "2h", idleTimeout: "15m", idleAction: "Suspend", env: { A: "1", B: "2" }, labels: { l: "v" }, podLabels: { "sandbox.users.io/x": "y" }, forkFrom: "src" })];
  assert.deepEqual(ours, (await pythonAnswers(cases)));
});

test("delete, confine and grep scripts are byte-identical (GNU grep and grep.py)", async () => {
  const cases: unknown[] = [];
  const ours: unknown[] = [];
  for (const [path, confine] of [["/tmp/a b", ""], ["/root/it's", "/root"], ["/ü ✓/日本", "/"]] as const) {
    cases.push({ op: "delete", args: { path, confine } }, { op: "confine", args: { path, confine } });
    ours.push(scripts.buildDelete(path, confine), scripts.buildConfineCheck(path, confine));
  }
  const gnu = [
    { alternatives: ["needle"], root: "/home/user", exclude_dirs: [".git"], glob: null, confine: "", cap: 10001, tag: "0f1e2d3c4b5a6978" },
    { alternatives: ["a b", "-e", "it's"], root: "/x/.git", exclude_dirs: [".git", "node_modules"], glob: null, confine: "", cap: 4, tag: null },
    { alternatives: ["x"], root: "/x", exclude_dirs: ["*.cache"], glob: null, confine: "", cap: 3, tag: "ab" },
    { alternatives: ["x"], root: "/x", exclude_dirs: [], glob: "*.py", confine: "", cap: 3, tag: "ab" },
    { alternatives: ["x"], root: "/x", exclude_dirs: [], glob: null, confine: "/x", cap: 3, tag: "ab" },
  ];
  for (const g of gnu) {
    cases.push({ op: "gnu_grep", args: g });
    ours.push({ fits: gnuGrep.gnuGrepFits(g.root, g.exclude_dirs, g.glob, g.confine), command: gnuGrep.buildGnuGrep(g.alternatives, g.root, { excludeDirs: g.exclude_dirs, cap: g.cap, tag: g.tag }) });
  }
  for (const tag of ["0f1e2d3c4b5a6978", "ab"]) {
    cases.push({ op: "stop_search", args: { tag } });
    ours.push(gnuGrep.buildStopSearch(tag));
  }
  const greps = [
    { pattern: "needle", path: "/tmp", glob: null, max: null, exclude_dirs: [".git"], confine: "" },
    { pattern: "a\nb\n", path: "/w", glob: "*.{py,ts}", max: 5, exclude_dirs: [], confine: "/w" },
    { pattern: "\n", path: "/w", glob: "/src/**/[^_]*.py", max: 0, exclude_dirs: ["x"], confine: "" },
    { pattern: "ü ✓ 'q' \"dq\"", path: "/日本", glob: "{a,{b,c}}{d,e}", max: null, exclude_dirs: [], confine: "" },
    { pattern: "x", path: "/", glob: "{unbalanced", max: 1, exclude_dirs: [], confine: "" },
    { pattern: "x", path: "/", glob: "{a,b}".repeat(9), max: 1, exclude_dirs: [], confine: "" },
  ];
  for (const g of greps) {
    cases.push({ op: "grep", args: g });
    try {
      ours.push(pyscripts.buildGrep(g.pattern, g.path, g.glob, { maxCount: g.max, excludeDirs: g.exclude_dirs, confine: g.confine }));
    } catch (err) {
      ours.push({ error: (err as Error).message });
    }
  }
  const outputs = ["/a/z\u00001:zed\n/a/b\u00002:bee\n/a/b\u00001:b:ee\n", "", "/n\nl\u00003:x\n/a\u00001:y\n", "/a\u00001:y\n/b\u00002:cut sho", "/b\u00001:x\n@E2\n"];
  for (const stdout of outputs) {
    cases.push({ op: "gnu_grep_rows", args: { stdout } });
    ours.push(gnuGrep.gnuGrepRows(stdout) ?? gnuGrep.gnuGrepRowsSlowly(stdout));
  }
  assert.deepEqual(ours, await pythonAnswers(cases));
});

test("path rules are the Python client's: virtual mode, write prefixes, refusals and their messages", async () => {
  const paths: Array<[string, boolean]> = [
    ["/a/b", false], ["/a/b", true], ["//a/./b/", true], ["/a/../etc", false], ["/a/../etc", true], ["relative", false], ["", false],
    ["/nul\u0000x", false], ["/~root/x", false], ["/x/~y", true], ["/", false], ["/", true], ["/data/in/deep", true], ["/data", true],
    ["/dat", true], ["/" + "n".repeat(256), false], ["/" + "d/".repeat(2100), false], ["/it's", true], ["/tab\there", true],
  ];
  const rules = [
    {},
    { virtual_mode: true, root_dir: "/home/user/work/" },
    { allow_prefixes: ["/data", "/data/in", "/tmp"] },
    { virtual_mode: true, root_dir: "/srv", allow_prefixes: ["/data"] },
    { allow_prefixes: [] },
    { virtual_mode: true },
    { root_dir: "/x" },
    { allow_prefixes: ["relative"] },
  ];
  const cases: unknown[] = [];
  const ours: unknown[] = [];
  for (const r of rules) {
    cases.push({ op: "policy", args: { rules: r, paths } });
    let policy: PathPolicy;
    try {
      policy = new PathPolicy({ virtualMode: (r as { virtual_mode?: boolean }).virtual_mode, rootDir: (r as { root_dir?: string }).root_dir, allowPrefixes: (r as { allow_prefixes?: string[] }).allow_prefixes });
    } catch (err) {
      ours.push({ rules_error: (err as Error).message });
      continue;
    }
    ours.push(
      paths.map(([path, write]) => {
        try {
          const resolved = policy.resolve(path, write);
          return { ...resolved, shown: policy.display(resolved.real) };
        } catch (err) {
          if (!(err instanceof PathRefused)) throw err;
          return { code: err.code, message: err.message };
        }
      }),
    );
  }
  const theirs = (await pythonAnswers(cases)) as Array<{ rules_error?: string }>;
  // The rule errors name the option in each language's spelling; that there is one is what must agree.
  theirs.forEach((answer, i) => {
    const mine = ours[i] as { rules_error?: string };
    if (answer.rules_error !== undefined) {
      assert.ok(mine.rules_error, `rules ${JSON.stringify(rules[i])}: Python refuses (${answer.rules_error}), TypeScript does not`);
      mine.rules_error = answer.rules_error;
    }
  });
  assert.deepEqual(ours, theirs);
});

test("a user command's answer is read alike: a timeout, a SIGKILL before it (the OOM killer), a plain exit", async () => {
  const answers = [
    ["@LKC 137 100.00 102.00\n", "timeout", 2],
    ["@LKC 137 100.00 100.50\n", "timeout", 60],
    ["@LKC 137 - -\n" + Buffer.from("allocating\n").toString("base64"), "none", 60],
    ["@LKC 9 - -\n", "timeout", 60],
  ] as const;
  const cases = answers.map(([stdout, runner, timeout]) => ({
    op: "parse_user_command",
    args: { stdout, stderr: "", exit_code: 0, options: { timeout, max_output: 100, runner } },
  }));
  const ours = answers.map(([stdout, runner, timeout]) => {
    const r = scripts.parseUserCommand(stdout, "", 0, { timeout, maxOutput: 100, runner });
    return { output: r.output, exitCode: r.exitCode, timedOut: r.timedOut };
  });
  assert.deepEqual(ours, await pythonAnswers(cases));
  assert.equal(ours[1]!.output, scripts.SIGKILLED_NOTE);
  assert.match(ours[1]!.output, /out of memory \(OOM\) killer/);
});

test("both clients accept and refuse the same pod identity tokens, signed by either (EC and RSA keys)", async () => {
  const now = Date.now() / 1000;
  const pod = "s-7f3k2";
  // Signed by both clients' test signers (tests/unit/client/fakes.ClusterSigner and testing/cluster-signer.ts).
  const specs = [
    { namespace: "team-a", pod },
    { namespace: "team-b", pod },
    { namespace: "team-a", pod: "s-other" },
    { namespace: "team-a", pod, audience: "https://kubernetes.default.svc.cluster.local" },
    { namespace: "team-a", pod, offset: -7200, lifetime: 600 },
    { namespace: "team-a", pod, offset: -630, lifetime: 600 }, // expired 30 s ago: within the clock skew
    { namespace: "team-a", pod, offset: 600 },
    { namespace: "team-a", pod, offset: 30 }, // valid in 30 s: within the clock skew
    { namespace: "team-a", pod, forged: true },
  ];
  const sets = (await pythonAnswers([{ op: "identity_tokens", args: { specs, now } }]))[0] as Array<{ jwks: unknown; tokens: string[] }>;
  for (const kind of ["EC", "RSA"] as const) {
    const signer = new ClusterSigner(kind);
    const forger = new ClusterSigner(kind);
    const tokens = specs.map((s) =>
      (s.forged ? forger : signer).token(s.namespace, s.pod, { audience: s.audience, lifetime: s.lifetime, issued: now + (s.offset ?? 0) }),
    );
    const valid = tokens[0]!;
    const [head, , signature] = valid.split(".");
    tokens.push(
      "",
      "not.a-token",
      "a".repeat(20000),
      `W10.${valid.split(".")[1]}.${signature}`, // a header that is no object
      `${head}.${tokens[1]!.split(".")[1]}.${signature}`, // another pod's claims under the session pod's signature
      new ClusterSigner(kind, "k9").token("team-a", pod),
      signer.token("team-a", pod, { alg: kind === "EC" ? "RS256" : "ES256" }),
      signer.token("team-a", pod, { extra: { aud: POD_IDENTITY_AUDIENCE } }), // one audience, not a list
      signer.token("team-a", pod, { extra: { nbf: undefined } }),
      signer.token("team-a", pod, { extra: { exp: "never" } }),
      signer.token("team-a", pod, { extra: { "kubernetes.io": undefined } }),
    );
    sets.push({ jwks: signer.jwks(), tokens });
  }
  const cases = sets.map(({ jwks, tokens }) => ({ op: "identity_verdicts", args: { jwks, tokens, namespace: "team-a", pod, now } }));
  const ours = sets.map(({ jwks, tokens }) => {
    const identity = new PodIdentity("team-a", pod, ClusterKeys.parse(jwks));
    return tokens.map((token) => {
      try {
        identity.check(token, now);
        return "ok";
      } catch (err) {
        if (!(err instanceof UnverifiedPod)) throw err;
        return err.message;
      }
    });
  });
  const theirs = (await pythonAnswers(cases)) as string[][];
  // The same verdict for every token; the same words but where each language names its option or its parser.
  const worded = (m: string) => (m.includes("showed no identity token") ? "no token" : m.includes("is malformed") ? "malformed" : m);
  assert.deepEqual(ours.map((v) => v.map(worded)), theirs.map((v) => v.map(worded)));
  assert.deepEqual(ours[0]!.map((v) => v === "ok"), [true, false, false, false, false, true, false, true, false]);
  // The TypeScript-signed set: the same three, then one audience alone and no nbf.
  assert.deepEqual(ours[2]!.flatMap((v, i) => (v === "ok" ? [i] : [])), [0, 5, 7, 16, 17]);
});

test("the generated protocol holds the Python client's every protocol constant, value for value", async () => {
  const [python] = (await pythonAnswers([{ op: "protocol" }])) as [Record<string, unknown>];
  assert.deepEqual({ ...protocol }, python);
});

// The one Content-Encoding rule (langchain_k8s_client.protocol.content_codings_readable): the list elements of
// every Content-Encoding line, OWS-trimmed, compared case-insensitively; read only when each is empty or
// identity. Each case is the header lines an answer carries.
const codingCases: string[][] = [
  [], [""], ["identity"], ["Identity"], ["IDENTITY"], ["identity, identity"], ["identity,"], [" , identity ,\t"], ["identity", "identity"],
  ["gzip"], ["GZIP"], ["deflate"], ["br"], ["zstd"], ["x-custom"], ["identity, gzip"], ["identity", "gzip"], ["gzip", "identity"], ["gzip, gzip"],
  ["identity;q=1"], ["identit"], ["identityx"], ["\u0130dentity"], ["identity\u000b"], ["i dentity"],
];

test("Content-Encoding: both clients read and refuse the same answers (the rule, and each client's reader)", async () => {
  const [python] = (await pythonAnswers([{ op: "content_codings", args: { cases: codingCases } }])) as [Array<[boolean, string]>];
  // The rule itself, on the lines as Node hands them over (repeated lines joined with ", ").
  assert.deepEqual(codingCases.map((lines) => contentCodingsReadable(lines.length ? lines.join(", ") : undefined)), python.map(([rule]) => rule));
  assert.deepEqual(codingCases.map((lines) => contentCodingsReadable(lines)), python.map(([rule]) => rule));
  // The Python client's reader (limits) follows the rule.
  assert.deepEqual(python.map(([rule, verdict]) => verdict), python.map(([rule]) => (rule ? "read" : "refused")));
  // The TypeScript client's transport, against a pod sending each case's header lines as raw bytes: it
  // reads exactly the answers the Python client reads (a line Node's parser refuses is never read either).
  const printable = codingCases.filter((lines) => lines.every((line) => /^[\x20-\x7e\t]*$/.test(line)));
  const ours: string[] = [];
  const theirs: string[] = [];
  for (const lines of printable) {
    const body = '{"stdout": "", "stderr": "", "exit_code": 0}';
    const head = ["HTTP/1.1 200 OK", ...lines.map((line) => `Content-Encoding: ${line}`), `Content-Length: ${body.length}`, "Connection: close"];
    const server = net.createServer((socket) => socket.once("data", () => socket.end(head.join("\r\n") + "\r\n\r\n" + body)));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const t = new RuntimeTransport({ baseUrl: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}` });
    try {
      await t.script("true", false);
      ours.push("read");
    } catch (err) {
      assert.ok(err instanceof MalformedResponse, `${JSON.stringify(lines)}: ${String(err)}`);
      ours.push("refused");
    } finally {
      t.close();
      server.close();
    }
    theirs.push(python[codingCases.indexOf(lines)]![1]);
  }
  assert.deepEqual(ours, theirs);
  assert.ok(ours.includes("read") && ours.includes("refused"));
});

test("retries wait as the Python client's RetryPolicy waits", async () => {
  const retries = [0, 1, 2, 3, 4, 5];
  const randoms = [0, 0.25, 0.5, 0.999];
  const ours = retries.flatMap((retry) => randoms.map((r) => retryDelay(retry, () => r)));
  const python = (await pythonAnswers([{ op: "retry_delays", args: { retries, randoms } }]))[0] as number[];
  assert.equal(ours.length, python.length);
  ours.forEach((delay, i) => assert.ok(Math.abs(delay - python[i]!) < 1e-12, `${delay} != ${python[i]}`));
});
