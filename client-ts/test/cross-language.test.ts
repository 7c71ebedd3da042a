// Both clients send byte-identical in-pod scripts and compute the same names and activity values: the
// Python client (test/reference.py, run with the repository's venv) answers the same cases.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createInterface } from "node:readline";
import { after, test as nodeTest } from "node:test";
import { fileURLToPath } from "node:url";
import { formatActivity } from "../src/activity.js";
import { sessionName, threadHash } from "../src/manager.js";
import * as scripts from "../src/scripts.js";
import { toSpec } from "../src/sessions.js";
import { PathPolicy, PathRefused } from "../src/paths.js";

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
  const ours = [scripts.buildProbe(), scripts.buildUploadFinalize(upload), scripts.buildDownloadPrepare(download, prep), scripts.buildRemove(["/base/.lkc-staging/dn-1", "/base/.lkc-staging/dn 2"])];
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
    const info = scripts.parseProbe(stdout);
    ours.push({ hostname: info.hostname, addresses: info.addresses, judged: ips.map((ip) => [scripts.showsFamilyOf(info, ip), scripts.holds(info, ip)]) });
  }
  assert.deepEqual(ours, await pythonAnswers(cases));
});

test("the python3 programs (ls, edit) are byte-identical, their JSON argument too", async () => {
  const paths = ["/tmp/a", "/tmp/ü ✓/日本", "/it's \"quoted\"\\", "/tab\tnl\n\u007f"];
  const cases: unknown[] = [];
  const ours: unknown[] = [];
  for (const path of paths) {
    cases.push({ op: "ls", args: { path, confine: "" } }, { op: "edit", args: { path, old: "ä\r\n", new: "😀 $x `y`", all: true, confine: "/tmp" } });
    ours.push(scripts.buildLs(path, ""), scripts.buildEdit(scripts.editPayload(path, "ä\r\n", "😀 $x `y`", true, "/tmp")));
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
    { alternatives: ["needle"], root: "/home/user", exclude_dirs: [".git"], glob: null, confine: "", cap: 10001, budget: 20 },
    { alternatives: ["a b", "-e", "it's"], root: "/x/.git", exclude_dirs: [".git", "node_modules"], glob: null, confine: "", cap: 4, budget: null },
    { alternatives: ["x"], root: "/x", exclude_dirs: ["*.cache"], glob: null, confine: "", cap: 3, budget: 20 },
    { alternatives: ["x"], root: "/x", exclude_dirs: [], glob: "*.py", confine: "", cap: 3, budget: 20 },
    { alternatives: ["x"], root: "/x", exclude_dirs: [], glob: null, confine: "/x", cap: 3, budget: 20 },
  ];
  for (const g of gnu) {
    cases.push({ op: "gnu_grep", args: g });
    ours.push({ fits: scripts.gnuGrepFits(g.root, g.exclude_dirs, g.glob, g.confine), command: scripts.buildGnuGrep(g.alternatives, g.root, { excludeDirs: g.exclude_dirs, cap: g.cap, budget: g.budget }) });
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
      ours.push(scripts.buildGrep(g.pattern, g.path, g.glob, { maxCount: g.max, excludeDirs: g.exclude_dirs, confine: g.confine }));
    } catch (err) {
      ours.push({ error: (err as Error).message });
    }
  }
  const outputs = ["/a/z\u00001:zed\n/a/b\u00002:bee\n/a/b\u00001:b:ee\n", "", "/n\nl\u00003:x\n/a\u00001:y\n", "/a\u00001:y\n/b\u00002:cut sho", "/b\u00001:x\n@E2\n"];
  for (const stdout of outputs) {
    cases.push({ op: "gnu_grep_rows", args: { stdout } });
    ours.push(scripts.gnuGrepRows(stdout) ?? scripts.gnuGrepRowsSlowly(stdout));
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
