// Our equivalent of the sandbox standard suite (`@langchain/sandbox-standard-tests` is not published on
// npm; the cases follow langchain-tests' SandboxIntegrationTests, which the Python client passes), against
// AgentSessionSandbox on the dev cluster. Run by tests/e2e/test_ts_client.py with TS_E2E_NAMESPACE and
// TS_E2E_POOL set; never by `npm test`.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { AgentSessionSandbox, type AgentSessionSandboxOptions } from "../src/index.js";

const namespace = process.env.TS_E2E_NAMESPACE!;
const pool = process.env.TS_E2E_POOL ?? "python-pool";
let sb: AgentSessionSandbox;
const root = `/tmp/conf-${process.pid}`;
const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array | null) => new TextDecoder().decode(b ?? new Uint8Array());
const readText = async (path: string, offset?: number, limit?: number) => {
  const r = await sb.read(path, offset, limit);
  assert.equal(r.error, undefined, `read ${path}: ${r.error}`);
  return typeof r.content === "string" ? r.content : dec(r.content ?? null);
};

// The same session with other path options (attaching creates nothing).
const attach = (options: AgentSessionSandboxOptions) => AgentSessionSandbox.create(sb.id, { namespace, ...options });

before(async () => {
  sb = await AgentSessionSandbox.create("ts-conformance", { namespace, warmPool: pool, ttl: "1h" });
  await sb.waitReady();
});
after(async () => {
  await sb.deleteSession();
  sb.close();
});

test("execute: output, exit code, stderr merged, large stdout", async () => {
  const r = await sb.execute("echo out; echo err >&2; exit 3");
  assert.equal(r.exitCode, 3);
  assert.match(r.output, /out/);
  assert.match(r.output, /err/);
  const big = await sb.execute("python3 -c \"print('x' * 200000)\"");
  assert.equal(big.exitCode, 0);
  assert.equal(big.output.trim().length, 200000);
});

test("execute: the timeout is enforced inside the pod", async () => {
  const started = Date.now();
  const r = await sb.execute("sleep 30", { timeout: 2 });
  assert.equal(r.exitCode, 124);
  assert.match(r.output, /timed out after 2 seconds/);
  assert.ok(Date.now() - started < 15000);
});

test("write creates parents, read returns the text, with offset and limit", async () => {
  const w = await sb.write(`${root}/a/b/new.txt`, "line1\nline2\nline3\n");
  assert.equal(w.error, undefined);
  assert.match(await readText(`${root}/a/b/new.txt`), /line1/);
  const slice = await readText(`${root}/a/b/new.txt`, 1, 1);
  assert.match(slice, /line2/);
  assert.doesNotMatch(slice, /line1|line3/);
});

test("write unicode, special characters, spaces in the path, an empty file", async () => {
  const text = "héllo ✓ 日本 $HOME `x` 'q' \"d\" \\ \t";
  await sb.write(`${root}/with space/ü.txt`, text);
  assert.match(await readText(`${root}/with space/ü.txt`), /héllo ✓ 日本 \$HOME `x` 'q' "d"/);
  await sb.write(`${root}/empty.txt`, "");
  const [d] = await sb.downloadFiles([`${root}/empty.txt`]);
  assert.equal(d!.error, null);
  assert.equal(d!.content!.length, 0);
});

test("read of a missing file is an error", async () => {
  const r = await sb.read(`${root}/missing.txt`);
  assert.ok(r.error);
});

test("edit: single, multiple without and with replaceAll, not found", async () => {
  await sb.write(`${root}/e.txt`, "a x a\n");
  assert.ok((await sb.edit(`${root}/e.txt`, "a", "b")).error, "two occurrences without replaceAll is an error");
  const all = await sb.edit(`${root}/e.txt`, "a", "b", true);
  assert.equal(all.error, undefined);
  assert.equal(all.occurrences, 2);
  assert.equal(await sb.edit(`${root}/e.txt`, "x", "y").then((r) => r.error), undefined);
  assert.match(dec((await sb.downloadFiles([`${root}/e.txt`]))[0]!.content), /^b y b\n$/);
  assert.ok((await sb.edit(`${root}/e.txt`, "zzz", "y")).error);
  assert.ok((await sb.edit(`${root}/nope.txt`, "a", "b")).error);
});

test("upload and download: roundtrip, order, binary, 1 MiB, staged path", async () => {
  const binary = new Uint8Array(256).map((_, i) => i);
  const large = new Uint8Array(1024 * 1024 + 7).map((_, i) => (i * 31) % 251);
  const files: Array<[string, Uint8Array]> = [
    [`${root}/up/1.txt`, enc("one")],
    [`${root}/up/2.bin`, binary],
    [`${root}/up/large.bin`, large],
  ];
  const up = await sb.uploadFiles(files);
  assert.deepEqual(up.map((u) => u.error), [null, null, null]);
  assert.deepEqual(up.map((u) => u.path), files.map(([p]) => p));
  const down = await sb.downloadFiles(files.map(([p]) => p));
  assert.deepEqual(down.map((d) => d.path), files.map(([p]) => p));
  assert.equal(dec(down[0]!.content), "one");
  assert.deepEqual(down[1]!.content, binary);
  assert.equal(down[2]!.content!.length, large.length);
  assert.deepEqual(Buffer.from(down[2]!.content!).equals(Buffer.from(large)), true);
});

test("download errors: not found, is a directory, permission denied, relative path", async () => {
  await sb.write(`${root}/secret.txt`, "s");
  const root_ = (await sb.execute(`chmod 000 ${root}/secret.txt; id -u`)).output.trim() === "0";
  const [missing, dir, denied, relative] = await sb.downloadFiles([`${root}/none`, "/tmp", `${root}/secret.txt`, "relative.txt"]);
  assert.equal(missing!.error, "file_not_found");
  assert.equal(dir!.error, "is_directory");
  // root reads a mode-000 file (the kwok node's pods run as the host's user).
  assert.equal(denied!.error, root_ ? null : "permission_denied");
  assert.equal(relative!.error, "invalid_path");
  const [up] = await sb.uploadFiles([["relative.txt", enc("x")]]);
  assert.equal(up!.error, "invalid_path");
});

test("ls lists files and directories, unicode names", async () => {
  await sb.uploadFiles([[`${root}/ls/f.txt`, enc("f")], [`${root}/ls/sub/g.txt`, enc("g")], [`${root}/ls/ünï.txt`, enc("u")]]);
  const r = await sb.ls(`${root}/ls`);
  assert.equal(r.error, undefined);
  const names = (r.files ?? []).map((f) => f.path.replace(/\/$/, "").split("/").pop()).sort();
  assert.deepEqual(names, ["f.txt", "sub", "ünï.txt"]);
  assert.ok((r.files ?? []).find((f) => f.path.includes("sub"))!.is_dir);
});

test("grep: literal, line numbers, glob filter, no matches", async () => {
  await sb.uploadFiles([[`${root}/g/a.py`, enc("x = 1\nneedle.*(\ny = 2\nneedle.*(\n")], [`${root}/g/b.txt`, enc("needle.*(\n")]]);
  const all = await sb.grep("needle.*(", `${root}/g`);
  assert.equal(all.error, undefined);
  assert.deepEqual((all.matches ?? []).map((m) => [m.path.split("/").pop(), m.line]).sort(), [["a.py", 2], ["a.py", 4], ["b.txt", 1]]);
  const py = await sb.grep("needle", `${root}/g`, "*.py");
  assert.deepEqual([...new Set((py.matches ?? []).map((m) => m.path.split("/").pop()))], ["a.py"]);
  assert.deepEqual((await sb.grep("absent-text", `${root}/g`)).matches ?? [], []);
});

test("glob: basic, recursive, character class, no matches", async () => {
  await sb.uploadFiles([[`${root}/gl/a1.txt`, enc("")], [`${root}/gl/b2.txt`, enc("")], [`${root}/gl/d/c3.md`, enc("")]]);
  const names = async (pattern: string) => ((await sb.glob(pattern, `${root}/gl`)).files ?? []).map((f) => f.path.split("/").pop()).sort();
  assert.deepEqual(await names("*.txt"), ["a1.txt", "b2.txt"]);
  assert.deepEqual(await names("**/*.md"), ["c3.md"]);
  assert.deepEqual(await names("[a]*.txt"), ["a1.txt"]);
  assert.deepEqual(await names("*.none"), []);
});

test("the runtime answering is the pod the status names", async () => {
  const info = await sb.checkIdentity();
  const view = await sb.session();
  assert.equal(info.hostname, view.podName);
});

test("delete: a file, a tree, a missing path (scripts/delete.sh)", async () => {
  await sb.uploadFiles([[`${root}/del/f.txt`, enc("f")], [`${root}/del/tree/a/b.txt`, enc("b")]]);
  assert.deepEqual(await sb.delete(`${root}/del/f.txt`), { path: `${root}/del/f.txt` });
  assert.deepEqual(await sb.delete(`${root}/del/tree`), { path: `${root}/del/tree` });
  assert.deepEqual(await sb.delete(`${root}/del/none`), { error: `Error: '${root}/del/none' not found` });
  assert.deepEqual(((await sb.ls(`${root}/del`)).files ?? []).map((f) => f.path), []);
});

test("grep with no path searches where commands run; a missing path is an explicit error", async () => {
  await sb.uploadFiles([[`${root}/gw/n.txt`, enc("grep-here-marker\n")]]);
  const here = await attach({ workingDir: `${root}/gw` });
  const found = await here.grep("grep-here-marker");
  assert.deepEqual((found.matches ?? []).map((m) => [m.path, m.line]), [[`${root}/gw/n.txt`, 1]]);
  here.close();
  const missing = await sb.grep("x", `${root}/nowhere`);
  assert.match(missing.error ?? "", /path_not_found/);
});

test("virtual mode: paths under rootDir, mapped back; '..', '~' and a symlink out refused", async () => {
  const vroot = `${root}/virtual`;
  await sb.uploadFiles([[`${vroot}/docs/a.md`, enc("alpha\nneedle\n")]]);
  assert.equal((await sb.execute(`ln -s /etc ${vroot}/out && ln -s /etc/hostname ${vroot}/host`)).exitCode, 0);
  const v = await attach({ virtualMode: true, rootDir: vroot, allowPrefixes: ["/docs"] });
  const read = await v.read("/docs/a.md");
  assert.equal(read.error, undefined);
  assert.match(String(read.content), /1\talpha\n.*2\tneedle/);
  assert.deepEqual(((await v.ls("/docs")).files ?? []).map((f) => f.path), ["/docs/a.md"]);
  assert.deepEqual((await v.grep("needle", "/")).matches, [{ path: "/docs/a.md", line: 2, text: "needle" }]);
  assert.deepEqual(((await v.glob("**/*.md", "/")).files ?? []).map((f) => f.path), ["docs/a.md"]);
  assert.equal((await v.write("/docs/b.md", "beta")).error, undefined);
  assert.equal(dec((await sb.downloadFiles([`${vroot}/docs/b.md`]))[0]!.content), "beta");
  assert.deepEqual(await v.edit("/docs/b.md", "beta", "gamma"), { path: "/docs/b.md", occurrences: 1 });
  // Refused before anything is sent, or in the pod for symlinks.
  assert.equal((await v.downloadFiles(["/docs/../../etc/passwd"]))[0]!.error, "invalid_path");
  assert.equal((await v.downloadFiles(["/~root/x"]))[0]!.error, "invalid_path");
  assert.equal((await v.downloadFiles(["/out/hostname"]))[0]!.error, "invalid_path");
  assert.match((await v.read("/host")).error ?? "", /invalid_path/);
  assert.match((await v.ls("/out")).error ?? "", /invalid_path/);
  assert.match((await v.glob("*", "/out")).error ?? "", /invalid_path/);
  // Writes outside allowPrefixes: permission_denied; the root itself is never deleted.
  assert.equal((await v.uploadFiles([["/elsewhere.txt", enc("x")]]))[0]!.error, "permission_denied");
  assert.match((await v.write("/elsewhere.txt", "x")).error ?? "", /permission_denied/);
  assert.match((await v.delete("/docs")).error ?? "", /refusing to delete the root/);
  assert.deepEqual(await v.delete("/docs/b.md"), { path: "/docs/b.md" });
  assert.equal((await v.uploadFiles([["/docs/../x", enc("x")]]))[0]!.error, "invalid_path");
  v.close();
});
