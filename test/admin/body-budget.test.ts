// Admin bodies are read under a budget (SPEC §13), as every key's body is: bytes reserved as they arrive,
// a body past its route's cap refused with 413 request_too_large once server.body_timeout_ms has passed
// even if the client never sends the rest, a stalled one refused with 408 at that bound. Before, the
// admin routes read with a cap but no budget: a body declared past the cap got no answer until the client
// had sent every byte of it, or until request_timeout_ms (30 s) cut it with a 408; a stalled body held its
// request that long; and the bytes were in no budget. Raw sockets, so the test decides every byte sent.
import t from 'tap';
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { ADMIN_TOKEN, startGateway, type TestGateway } from '../helpers/gateway.ts';
import { maxShareBodyBytes } from '../../src/shares/share-body.ts';

const BODY_TIMEOUT_MS = 1000;
// Far below request_timeout_ms (30 s, the bound before the fix) and far above body_timeout_ms, for a loaded machine.
const ANSWERED_WITHIN_MS = 10_000;
/** The admin share body's cap with the default shares config (1 MiB snapshot, 20 files). */
const SHARE_CAP = maxShareBodyBytes({ maxSnapshotBytes: 1024 * 1024, maxFiles: 20 });

interface Raw {
  socket: Socket;
  /** The status (0 when the socket closed without one), the parsed JSON body, and ms since the head was sent. */
  response: Promise<{ status: number; body: any; ms: number }>;
  write(bytes: Buffer | string): void;
}

/** Sends a request head (`length`: a content-length, or 'chunked'), then only the body bytes the test writes. */
function raw(baseUrl: string, method: string, path: string, length: number | 'chunked'): Raw {
  const u = new URL(baseUrl);
  const socket = connect(Number(u.port), u.hostname);
  socket.on('error', () => {});
  const framing = length === 'chunked' ? 'transfer-encoding: chunked' : `content-length: ${length}`;
  const started = performance.now();
  socket.write(
    `${method} ${path} HTTP/1.1\r\nhost: ${u.host}\r\nauthorization: Bearer ${ADMIN_TOKEN}\r\n` +
      `content-type: application/json\r\n${framing}\r\n\r\n`,
  );
  const response = new Promise<{ status: number; body: any; ms: number }>((resolve) => {
    let text = '';
    let settled = false;
    const settle = () => {
      settled = true;
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
      const body = text.slice(text.indexOf('\r\n\r\n') + 4);
      let parsed: unknown = body;
      try {
        parsed = JSON.parse(body);
      } catch {}
      resolve({ status, body: parsed, ms: performance.now() - started });
    };
    socket.on('data', (b: Buffer) => {
      text += b.toString('utf8');
      const head = text.indexOf('\r\n\r\n');
      const len = /\r\ncontent-length: (\d+)/i.exec(text);
      if (!settled && head >= 0 && len && Buffer.byteLength(text.slice(head + 4)) >= Number(len[1])) settle();
    });
    socket.on('close', () => settled || settle());
  });
  t.teardown(() => socket.destroy());
  const write = (bytes: Buffer | string) => {
    if (socket.destroyed) return;
    socket.write(
      length === 'chunked'
        ? Buffer.concat([Buffer.from(`${Buffer.byteLength(bytes).toString(16)}\r\n`), Buffer.from(bytes), Buffer.from('\r\n')])
        : bytes,
    );
  };
  return { socket, response, write };
}

async function inflight(gw: TestGateway): Promise<number> {
  const text = await (await fetch(`${gw.adminUrl}/metrics`)).text();
  return Number(/^tollgate_inflight_body_bytes (\S+)/m.exec(text)?.[1] ?? NaN);
}

/** A share body for the admin route with a snapshot of about `bytes` bytes (one long message). */
function shareBody(account: string, bytes: number): string {
  return JSON.stringify({ account, snapshot: { title: 't', messages: [{ role: 'user', content: 'x'.repeat(bytes) }] } });
}

const gw = await startGateway(t, { config: { server: { body_timeout_ms: BODY_TIMEOUT_MS } } });
const { id: keyId } = await gw.createKey({ account: 'acme', env: 'test' });

t.test('POST /admin/shares: a body declared past the cap, mostly never sent → 413 within body_timeout_ms', async (t) => {
  const r = raw(gw.adminUrl, 'POST', '/admin/shares', 5 * 1024 * 1024);
  r.write(Buffer.alloc(64 * 1024, ' '));
  const res = await r.response;
  t.equal(res.status, 413, 'refused for its size, not cut by request_timeout_ms');
  t.equal(res.body?.error?.code, 'request_too_large');
  t.match(res.body?.error?.message, `exceeds the limit of ${SHARE_CAP} bytes`, "the cap: the shares config's snapshot, envelope and files");
  t.ok(res.ms < ANSWERED_WITHIN_MS, `answered in ${Math.round(res.ms)} ms while ${5 * 1024 * 1024 - 64 * 1024} declared bytes never came`);
});

t.test('POST /admin/shares: a chunked body that runs past the cap, then stalls → 413, its bytes given back', async (t) => {
  const r = raw(gw.adminUrl, 'POST', '/admin/shares', 'chunked');
  for (let sent = 0; sent <= SHARE_CAP; sent += 256 * 1024) r.write(Buffer.alloc(256 * 1024, ' '));
  const res = await r.response;
  t.equal(res.status, 413);
  t.equal(res.body?.error?.code, 'request_too_large');
  t.ok(res.ms < ANSWERED_WITHIN_MS, `answered in ${Math.round(res.ms)} ms, the client still holding its socket open`);
  t.equal(await inflight(gw), 0, 'nothing held once refused');
});

t.test('POST /admin/shares: a stalled body under the cap is counted while it arrives, then 408', async (t) => {
  const r = raw(gw.adminUrl, 'POST', '/admin/shares', 200_000);
  r.write(Buffer.alloc(100_000, ' '));
  let seen = 0;
  for (let i = 0; i < 50 && seen < 100_000; i++) {
    seen = await inflight(gw);
    if (seen < 100_000) await sleep(20);
  }
  t.equal(seen, 100_000, 'its bytes are in tollgate_inflight_body_bytes as they arrive');
  const res = await r.response;
  t.equal(res.status, 408);
  t.equal(res.body?.error?.code, 'request_timeout');
  t.ok(res.ms < ANSWERED_WITHIN_MS, `answered in ${Math.round(res.ms)} ms (server.body_timeout_ms ${BODY_TIMEOUT_MS})`);
  t.equal(await inflight(gw), 0, 'and given back');
});

t.test('POST /admin/shares: a body under the cap, sent whole, publishes; nothing stays held', async (t) => {
  const text = shareBody('acme', 1000 * 1000);
  t.ok(Buffer.byteLength(text) < SHARE_CAP && Buffer.byteLength(text) > SHARE_CAP - 300_000, 'close to the cap');
  const r = raw(gw.adminUrl, 'POST', '/admin/shares', Buffer.byteLength(text));
  r.write(text);
  const res = await r.response;
  t.equal(res.status, 201);
  t.match(res.body, { account: 'acme', slug: /^[1-9A-HJ-NP-Za-km-z]{22}$/ });
  t.equal(await inflight(gw), 0);
});

// Every other admin route that reads a body: [method, path, its cap].
const ROUTES: [string, string, number][] = [
  ['POST', '/admin/keys', 64 * 1024],
  ['PATCH', `/admin/keys/${keyId}`, 64 * 1024],
  ['POST', `/admin/keys/${keyId}/roll`, 64 * 1024],
  ['POST', '/admin/accounts/acme/credits', 64 * 1024],
  ['POST', '/admin/accounts/acme/usage/rebuild', 4096],
  ['POST', '/admin/console/sessions', 4096],
];

t.test('every admin route with a body: past its cap → 413 and stalled → 408, both within body_timeout_ms', async (t) => {
  const refused = ROUTES.map(([method, path, cap]) => {
    const r = raw(gw.adminUrl, method, path, cap * 4);
    r.write(Buffer.alloc(100, ' '));
    return r.response;
  });
  const stalled = ROUTES.map(([method, path, cap]) => {
    const r = raw(gw.adminUrl, method, path, cap);
    r.write('{');
    return r.response;
  });
  for (const [i, res] of (await Promise.all(refused)).entries()) {
    const [method, path] = ROUTES[i]!;
    t.equal(res.status, 413, `${method} ${path} declared past its cap`);
    t.equal(res.body?.error?.code, 'request_too_large');
    t.ok(res.ms < ANSWERED_WITHIN_MS, `in ${Math.round(res.ms)} ms`);
  }
  for (const [i, res] of (await Promise.all(stalled)).entries()) {
    const [method, path] = ROUTES[i]!;
    t.equal(res.status, 408, `${method} ${path} stalled`);
    t.equal(res.body?.error?.code, 'request_timeout');
    t.ok(res.ms < ANSWERED_WITHIN_MS, `in ${Math.round(res.ms)} ms`);
  }
  t.equal(await inflight(gw), 0);
  t.equal((await gw.admin(`/admin/keys/${keyId}`)).body.active, true, 'nothing changed');
});

t.test('the admin budget is its own: keys filling theirs leave the operator able to act; past its own → 503', async (t) => {
  // The keys' budget is 16 KiB and a key's 1 KiB: the admin budget is one whole share body (the larger of the two).
  const small = await startGateway(t, {
    config: {
      server: { body_timeout_ms: 5000 },
      limits: { max_inflight_body_bytes: 16 * 1024, max_inflight_body_bytes_per_key: 1024 },
    },
  });
  const keys = await Promise.all(Array.from({ length: 16 }, () => small.createKey({ account: 'mallory', env: 'test' })));
  // Sixteen keys each stall 1 KiB of a chat body: the keys' budget is full.
  const stalls = keys.map(({ key }) => {
    const u = new URL(small.url);
    const s = connect(Number(u.port), u.hostname);
    s.on('error', () => {});
    t.teardown(() => s.destroy());
    s.write(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: ${u.host}\r\nauthorization: Bearer ${key}\r\n` +
        `content-type: application/json\r\ncontent-length: 2048\r\n\r\n${' '.repeat(1024)}`,
    );
    return s;
  });
  for (let i = 0; i < 100 && (await inflight(small)) < 16 * 1024; i++) await sleep(20);
  t.equal(await inflight(small), 16 * 1024, "the keys' budget is full");
  const victim = await small.createKey({ account: 'acme', env: 'test' });
  const refused = await fetch(`${small.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { ...small.auth(victim.key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-free', messages: [{ role: 'user', content: 'hi' }] }),
  });
  t.equal(refused.status, 503, 'another key is refused (overloaded)');
  await refused.arrayBuffer();

  const disabled = await small.admin(`/admin/keys/${keys[0]!.id}`, { method: 'PATCH', body: { active: false } });
  t.equal(disabled.status, 200, "the operator disables an attacker's key all the same");
  t.equal(disabled.body.active, false);
  const share = await small.admin('/admin/shares', { body: JSON.parse(shareBody('acme', 1000 * 1000)) });
  t.equal(share.status, 201, "a share near the shares config's cap fits the admin budget though a key's cap is 1 KiB");

  // Two stalled admin share bodies of 700 KB: the second passes the admin budget (one share body).
  const first = raw(small.adminUrl, 'POST', '/admin/shares', 800_000);
  first.write(Buffer.alloc(700_000, ' '));
  for (let i = 0; i < 100 && (await inflight(small)) < 16 * 1024 + 700_000; i++) await sleep(20);
  const second = raw(small.adminUrl, 'POST', '/admin/shares', 800_000);
  second.write(Buffer.alloc(700_000, ' '));
  const res = await second.response;
  t.equal(res.status, 503, 'past the admin budget');
  t.equal(res.body?.error?.code, 'overloaded');
  first.socket.destroy();
  for (const s of stalls) s.destroy();
  for (let i = 0; i < 100 && (await inflight(small)) > 0; i++) await sleep(20);
  t.equal(await inflight(small), 0, 'every byte given back');
});
