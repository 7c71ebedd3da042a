import assert from "node:assert/strict";
import { test } from "node:test";
import { ActivityThrottle, intervalFor, parseSeconds } from "../src/activity.js";
import { conflicts } from "../src/sessions.js";
import { normalizeDuration } from "../src/sandbox.js";

test("the throttle reports once per interval, and again for a longer busy window", () => {
  const t = new ActivityThrottle(10);
  assert.equal(t.claim(null, 100), 0);
  assert.equal(t.claim(null, 105), null);
  assert.equal(t.claim(300, 106), 300); // a command reaching past the last report: announced at once
  assert.equal(t.claim(300, 107), null);
  assert.equal(t.claim(null, 117), 0);
  assert.ok(Math.abs(t.wake(200) - 206) < 1e-9);
  t.forget();
  assert.equal(t.claim(null, 201), 0);
});

test("intervals and durations", () => {
  assert.equal(intervalFor(null), 60);
  assert.equal(intervalFor("10m"), 60);
  assert.equal(intervalFor("30s"), 6);
  assert.equal(intervalFor("2s"), 1);
  assert.equal(parseSeconds("1h30m"), 5400);
  assert.equal(parseSeconds("1.5h"), 5400);
  assert.equal(parseSeconds("2 h"), null);
  assert.equal(normalizeDuration(7200), "7200s");
  assert.throws(() => normalizeDuration("-1h"), /positive duration/);
});

test("attaching compares only the fields given", () => {
  const existing = { spec: { warmPoolRef: { name: "p" }, ttl: "1h", env: [{ name: "A", value: "1" }] } };
  assert.deepEqual(conflicts({ warmPool: "p" }, existing), []);
  assert.deepEqual(conflicts({}, existing), []);
  assert.match(conflicts({ ttl: "2h" }, existing)[0]!, /spec.ttl/);
  assert.match(conflicts({ env: { A: "2" } }, existing)[0]!, /spec.env/);
});
