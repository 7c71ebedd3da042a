// The pod's own addresses as the probe reports them (scripts/probe.sh: `v4=` the kernel's local routes as
// networks, `v6=` if_inet6's raw hex), and whether they hold an IP the API gave the session's pod: the
// semantics of langchain_k8s_client.commands (RuntimeInfo.holds, shows_family_of, _addresses), which use
// Python's ipaddress. An address of one family is never inside a network of the other (no IPv4-mapped
// matching), as there.
import net from "node:net";

type Family = 4 | 6;

interface Network {
  family: Family;
  value: bigint;
  prefix: number;
}

const BITS: Record<Family, number> = { 4: 32, 6: 128 };

function v4Value(text: string): bigint {
  return text.split(".").reduce((acc, part) => (acc << 8n) | BigInt(Number(part)), 0n);
}

/** The eight hextets of a valid IPv6 text (URL normalises it: no dotted tail, "::" at most once). */
function v6Value(text: string): bigint {
  const canonical = new URL(`http://[${text}]/`).hostname.slice(1, -1);
  const [head, tail] = canonical.includes("::") ? canonical.split("::") : [canonical, undefined];
  const left = head ? head.split(":") : [];
  const right = tail ? tail.split(":") : [];
  const groups = tail === undefined ? left : [...left, ...Array<string>(8 - left.length - right.length).fill("0"), ...right];
  return groups.reduce((acc, g) => (acc << 16n) | BigInt(parseInt(g, 16)), 0n);
}

function parseAddress(text: string): { family: Family; value: bigint } | null {
  if (net.isIPv4(text)) return { family: 4, value: v4Value(text) };
  if (net.isIPv6(text) && !text.includes("%")) return { family: 6, value: v6Value(text) };
  return null;
}

/** `ip_network(text, strict=False)`: host bits cleared; no prefix is a single address. */
function parseNetwork(text: string): Network | null {
  const [address, prefixText, extra] = text.split("/");
  if (address === undefined || extra !== undefined) return null;
  const parsed = parseAddress(address);
  if (parsed === null) return null;
  const bits = BITS[parsed.family];
  if (prefixText !== undefined && !/^\d{1,3}$/.test(prefixText)) return null;
  const prefix = prefixText === undefined ? bits : Number(prefixText);
  if (prefix > bits) return null;
  const host = (1n << BigInt(bits - prefix)) - 1n;
  return { family: parsed.family, value: parsed.value & ~host, prefix };
}

function formatNetwork(n: Network): string {
  if (n.family === 4) {
    const octets = [24n, 16n, 8n, 0n].map((shift) => String((n.value >> shift) & 255n));
    return `${octets.join(".")}/${n.prefix}`;
  }
  const groups = [112n, 96n, 80n, 64n, 48n, 32n, 16n, 0n].map((shift) => ((n.value >> shift) & 0xffffn).toString(16));
  return `${new URL(`http://[${groups.join(":")}]/`).hostname.slice(1, -1)}/${n.prefix}`;
}

/** The probe's `v4=` networks and `v6=` hex addresses, normalised and deduplicated (the kernel lists each
 * local route in two tables); anything unparsable is left out. */
export function probeAddresses(v4: string, v6: string): string[] {
  const found = new Set<string>();
  for (const text of v4.split(/\s+/).filter(Boolean)) {
    const network = parseNetwork(text);
    if (network) found.add(formatNetwork(network));
  }
  for (const text of v6.split(/\s+/).filter(Boolean)) {
    if (!/^[0-9a-f]{1,32}$/i.test(text)) continue;
    found.add(formatNetwork({ family: 6, value: BigInt(`0x${text}`), prefix: 128 }));
  }
  return [...found];
}

function within(address: { family: Family; value: bigint }, network: Network): boolean {
  if (address.family !== network.family) return false;
  const shift = BigInt(BITS[network.family] - network.prefix);
  return address.value >> shift === network.value >> shift;
}

/** `ip` is one of the pod's own addresses. */
export function holds(addresses: readonly string[], ip: string): boolean {
  const address = parseAddress(ip);
  if (address === null) return false;
  return addresses.some((text) => {
    const network = parseNetwork(text);
    return network !== null && within(address, network);
  });
}

/** The pod showed addresses of `ip`'s family (gVisor's kernel has no fib_trie: no IPv4 list). */
export function showsFamilyOf(addresses: readonly string[], ip: string): boolean {
  const address = parseAddress(ip);
  return address !== null && addresses.some((text) => parseNetwork(text)?.family === address.family);
}
