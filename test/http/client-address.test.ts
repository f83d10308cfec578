// Client addresses for per-address limits (SPEC §12): forwarding headers believed only from trusted
// proxies, the right-most untrusted hop taken, malformed values ignored.
import t from 'tap';
import type { IncomingMessage } from 'node:http';
import { createClientAddress } from '../../src/http/client-address.ts';

const req = (peer: string, headers: Record<string, string | string[]> = {}) =>
  ({ socket: { remoteAddress: peer }, headers }) as unknown as IncomingMessage;

t.test('no trusted proxies: the socket peer, whatever the headers say', async (t) => {
  const addr = createClientAddress([]);
  t.equal(addr(req('203.0.113.9', { 'x-forwarded-for': '1.2.3.4' })), '203.0.113.9');
  t.equal(addr(req('::ffff:203.0.113.9')), '203.0.113.9', 'IPv4 on a dual-stack socket');
  t.equal(addr(req('2001:db8::1', { forwarded: 'for=1.2.3.4' })), '2001:db8::1');
});

t.test('a spoofed chain from an untrusted peer is ignored', async (t) => {
  const addr = createClientAddress(['10.0.0.0/8']);
  t.equal(addr(req('203.0.113.9', { 'x-forwarded-for': '10.1.1.1, 1.2.3.4' })), '203.0.113.9');
});

t.test('behind trusted proxies: the right-most hop that is not trusted', async (t) => {
  const addr = createClientAddress(['10.0.0.0/8', '2001:db8:ffff::/48']);
  // The client wrote "6.6.6.6" itself; the edge proxy (10.0.0.2) appended the real client 198.51.100.7.
  t.equal(addr(req('10.0.0.1', { 'x-forwarded-for': '6.6.6.6, 198.51.100.7, 10.0.0.2' })), '198.51.100.7');
  t.equal(addr(req('::ffff:10.0.0.1', { 'x-forwarded-for': ['6.6.6.6', '198.51.100.8'] })), '198.51.100.8', 'repeated headers joined');
  t.equal(
    addr(req('10.0.0.1', { forwarded: 'for=6.6.6.6, for="[2001:db8::5]:443";proto=https' })),
    '2001:db8::5',
    'RFC 7239, IPv6 with port',
  );
  t.equal(addr(req('10.0.0.1', { forwarded: 'for=198.51.100.9:8443' })), '198.51.100.9', 'IPv4 with port');
  t.equal(addr(req('10.0.0.1', { 'x-forwarded-for': '10.0.0.3, 10.0.0.2' })), '10.0.0.3', 'every hop trusted: the left-most');
  t.equal(addr(req('10.0.0.1', { 'x-forwarded-for': 'garbage, <script>' })), '10.0.0.1', 'nothing parsable: the peer');
  t.equal(addr(req('10.0.0.1')), '10.0.0.1', 'no header: the peer');
  t.equal(addr(req('2001:db8:ffff::1', { 'x-forwarded-for': '198.51.100.10' })), '198.51.100.10', 'an IPv6 proxy range');
});
