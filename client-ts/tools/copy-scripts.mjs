// Copies the in-pod scripts from their one home (the Python package's scripts/) into this package, so the
// npm package ships them and both clients send the same bytes. The copy is committed (the package builds,
// tests and packs from its own folder); in a checkout every build refreshes it, and
// tests/unit/client/test_client_ts_scripts.py fails when the committed copy differs. Never edit the copy.
import { cpSync, existsSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const source = join(here, "..", "..", "client", "langchain_k8s_client", "scripts");
const target = join(here, "..", "scripts");
if (!existsSync(source)) {
  // This folder alone (a published package, or client-ts copied out): the committed copy is the scripts.
  if (existsSync(target)) process.exit(0);
  console.error(`copy-scripts: ${source} is missing: build from a checkout of the repository`);
  process.exit(1);
}
rmSync(target, { recursive: true, force: true });
mkdirSync(target, { recursive: true });
for (const name of readdirSync(source)) {
  if (/\.(sh|py)$/.test(name)) cpSync(join(source, name), join(target, name));
}
