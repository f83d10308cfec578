/**
 * The client's address for per-address limits (failed auth, failed admin auth, failed share reads).
 * `x-forwarded-for` and `forwarded` are believed only when the socket's peer is a trusted proxy
 * (`server.trusted_proxies`, SPEC §12): otherwise any client could pick a fresh address per request
 * and never be limited, or pin another client's address to lock it out. Behind trusted proxies the
 * address is the right-most hop that is not itself trusted (the left part of the list is whatever
 * the client wrote).
 */
import type { IncomingMessage } from 'node:http';
import { BlockList, isIP } from 'node:net';

export type ClientAddress = (req: IncomingMessage) => string;

/** `::ffff:10.0.0.1` (an IPv4 peer on a dual-stack socket) → `10.0.0.1`. */
function plain(addr: string): string {
  return addr.startsWith('::ffff:') && isIP(addr.slice(7)) === 4 ? addr.slice(7) : addr;
}

/** One `for=` value of RFC 7239 or one x-forwarded-for item → an address, or undefined. */
function parseHop(raw: string): string | undefined {
  let v = raw.trim().replace(/^"|"$/g, '');
  if (v.startsWith('[')) v = v.slice(1, v.indexOf(']') < 0 ? undefined : v.indexOf(']'));
  else if (isIP(v) === 0 && /^[\d.]+:\d+$/.test(v)) v = v.slice(0, v.lastIndexOf(':'));
  return isIP(v) ? plain(v) : undefined;
}

/** The hops a request came through, client first: x-forwarded-for, else forwarded's `for=`. */
function hops(req: IncomingMessage): string[] | undefined {
  const xff = req.headers['x-forwarded-for'];
  if (xff)
    return (Array.isArray(xff) ? xff.join(',') : xff)
      .split(',')
      .map(parseHop)
      .filter((h): h is string => h !== undefined);
  const fwd = req.headers.forwarded;
  if (!fwd) return undefined;
  const out: string[] = [];
  for (const element of fwd.split(',')) {
    for (const pair of element.split(';')) {
      const [k, v] = pair.split('=', 2);
      if (k?.trim().toLowerCase() === 'for' && v !== undefined) {
        const h = parseHop(v);
        if (h) out.push(h);
      }
    }
  }
  return out;
}

/** A resolver for the configured trusted proxies (CIDRs, validated at boot). */
export function createClientAddress(trustedProxies: readonly string[]): ClientAddress {
  const socketOnly: ClientAddress = (req) => plain(req.socket.remoteAddress ?? 'unknown');
  if (trustedProxies.length === 0) return socketOnly;
  const trusted = new BlockList();
  for (const cidr of trustedProxies) {
    const [addr, bits] = cidr.split('/') as [string, string];
    trusted.addSubnet(addr, Number(bits), isIP(addr) === 6 ? 'ipv6' : 'ipv4');
  }
  const isTrusted = (a: string) => trusted.check(a, isIP(a) === 6 ? 'ipv6' : 'ipv4');
  return (req) => {
    const peer = socketOnly(req);
    if (isIP(peer) === 0 || !isTrusted(peer)) return peer;
    const list = hops(req);
    if (!list || list.length === 0) return peer;
    for (let i = list.length - 1; i >= 0; i--) if (!isTrusted(list[i]!)) return list[i]!;
    return list[0]!;
  };
}
