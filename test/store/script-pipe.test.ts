// The credit scripts' own Redis connection against a real redis-server: replies in order, NOSCRIPT, AUTH/SELECT, fail fast, timeout, close.
import t from 'tap';
import type { Test } from 'tap';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createServer, type Socket } from 'node:net';
import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import * as K from '../../src/store/redis-keys.ts';
import { debitEntryData } from '../../src/store/debit-layout.ts';
import {
  createScriptPipe,
  luaScript,
  PipeError,
  type PipeTarget,
  type ScriptPipe,
  type ScriptPipeOptions,
} from '../../src/store/script-pipe.ts';
import { freePort } from '../helpers/ports.ts';
import { requireRedis, startRedis, type RedisFixture } from '../helpers/redis.ts';
import { waitFor } from '../helpers/wait.ts';

const ECHO = luaScript('return {1, tonumber(ARGV[1]), KEYS[1]}');
const SET = luaScript("return redis.call('SET', KEYS[1], ARGV[1])");

/** A pipe closed at the subtest's teardown; commandTimeoutMs defaults far above a loopback round trip. */
function openPipe(t: Test, o: Partial<ScriptPipeOptions> & { target: PipeTarget }): ScriptPipe {
  const pipe = createScriptPipe({ commandTimeoutMs: 2000, ...o });
  t.teardown(() => pipe.close());
  return pipe;
}

/** Where the fixture's server is, including the DB it gave us. */
function targetOf(redis: RedisFixture): PipeTarget {
  const u = new URL(redis.url);
  return { host: u.hostname, port: Number(u.port), db: Number(u.pathname.slice(1) || 0) };
}

/** How often the server has run each command (INFO commandstats). */
async function calls(client: Redis, cmd: string): Promise<number> {
  const info = await client.info('commandstats');
  return Number(new RegExp(`^cmdstat_${cmd}:calls=(\\d+)`, 'm').exec(info)?.[1] ?? 0);
}

async function connectedClients(client: Redis): Promise<number> {
  return Number(/^connected_clients:(\d+)/m.exec(await client.info('clients'))?.[1]);
}

/** The rejection of `p` and how long it took, or a failure if it did not reject within `boundMs`. */
async function rejection(p: Promise<unknown>, boundMs = 5000): Promise<{ err: Error; ms: number }> {
  const t0 = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`still pending after ${boundMs} ms`)), boundMs);
  });
  try {
    await Promise.race([p, bound]);
  } catch (err) {
    if ((err as Error).message.startsWith('still pending')) throw err;
    return { err: err as Error, ms: performance.now() - t0 };
  } finally {
    clearTimeout(timer);
  }
  throw new Error('resolved, expected a rejection');
}

/** A redis-server with --requirepass, killed at teardown (the fixture's server has no password). */
async function startAuthServer(t: Test, password: string): Promise<{ port: number; client(db?: number): Promise<Redis> }> {
  let child: ChildProcess | undefined;
  let port = 0;
  for (let attempt = 1; !child; attempt++) {
    port = await freePort();
    const c = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--requirepass', password],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let log = '';
    c.stdout.on('data', (b: Buffer) => (log = (log + b.toString()).slice(-8192)));
    c.stderr.on('data', (b: Buffer) => (log = (log + b.toString()).slice(-8192)));
    const ready = await waitFor(() => log.includes('Ready to accept connections') || c.exitCode !== null, 10_000).catch(() => false);
    if (ready && c.exitCode === null) {
      child = c;
    } else {
      c.kill('SIGKILL');
      if (!log.includes('Address already in use') || attempt >= 5) throw new Error(`redis-server --requirepass did not start:\n${log}`);
    }
  }
  const clients: Redis[] = [];
  const server = child;
  const killOnExit = () => server.kill('SIGKILL');
  process.once('exit', killOnExit);
  t.teardown(async () => {
    for (const c of clients) c.disconnect();
    const exited = once(server, 'exit');
    server.kill('SIGTERM');
    await exited;
    process.off('exit', killOnExit);
  });
  return {
    port,
    async client(db = 0) {
      const c = new Redis({ host: '127.0.0.1', port, password, db, lazyConnect: true, maxRetriesPerRequest: 1 });
      c.on('error', () => {});
      clients.push(c);
      await c.connect();
      return c;
    },
  };
}

t.test('run() executes a script and decodes its reply', async (t) => {
  const redis = await startRedis(t);
  if (!redis) return;
  const pipe = openPipe(t, { target: targetOf(redis) });
  await pipe.ready;
  t.ok(pipe.connected, 'connected once ready');

  t.same(await pipe.run(ECHO, ['k1'], [42]), [1, 42, 'k1'], 'an array of integers and a bulk string, from KEYS and ARGV');
  t.equal(await pipe.run(luaScript('return nil'), [], []), null, 'Lua nil is null');
  t.equal(await pipe.run(luaScript("return redis.status_reply('FINE')"), [], []), 'FINE', 'a status reply is its text');
  const text = 'modèle 😀 €';
  t.same(
    await pipe.run(luaScript('return {ARGV[1], string.len(ARGV[1])}'), [], [text]),
    [text, Buffer.byteLength(text)],
    'a multi-byte UTF-8 argument reaches Redis intact (its byte length) and comes back intact',
  );
  t.equal(await pipe.run(SET, ['pipe:set'], ['v1']), 'OK', 'a script that writes');
  t.equal(await redis.client.get('pipe:set'), 'v1', 'the write is on the server, in the fixture DB');

  const { err } = await rejection(pipe.run(luaScript("return redis.error_reply('BOOM it broke')"), [], []));
  t.equal(err.message, 'BOOM it broke', 'a script error rejects with the server message');
  t.ok(pipe.connected, 'an error reply does not drop the connection');
  t.same(await pipe.run(ECHO, ['k2'], [7]), [1, 7, 'k2'], 'the reply after an error belongs to its own call');
});

t.test('the credit scripts come back the way the store reads them', async (t) => {
  const redis = await startRedis(t);
  if (!redis) return;
  const pipe = openPipe(t, { target: targetOf(redis) });
  await pipe.ready;
  const hold = luaScript(await readFile(new URL('../../src/store/lua/hold.lua', import.meta.url), 'utf8'));
  const settle = luaScript(await readFile(new URL('../../src/store/lua/settle.lua', import.meta.url), 'utf8'));
  const acct = 'pipe';
  await redis.client.hset(K.balance(acct), 'balance', 1000);
  const due = 9_000_000_000_000;
  const holdKeys = [K.balance(acct), K.holdBucket(acct, due)];
  t.same(await pipe.run(hold, holdKeys, ['r1', 100, due]), [1, 1000, 100], 'hold: [taken, balance, held]');
  t.same(await pipe.run(hold, holdKeys, ['r1', 100, due]), [2, 1000, 100], 'hold again: [already there, balance, held]');
  const settleKeys = [K.balance(acct), K.holdBucket(acct, due), K.ledger(acct), K.holds(acct), K.settled(acct, 'r1')];
  const entry = debitEntryData({
    costMicros: 40,
    ts: '2026-11-22T10:00:00.000Z',
    requestId: 'r1',
    keyId: 'key_1',
    model: 'm',
    promptTokens: 3,
    completionTokens: 5,
    usageSource: 'upstream',
  });
  const args = ['r1', '-40', entry, '0', due];
  const first = (await pipe.run(settle, settleKeys, args)) as [string, number, number, number, number];
  t.match(first, [/^\d+-\d+$/, 0, 960, 0, 0], 'settle: [stream entry id, not replayed, balance, held, not a fresh bucket]');
  t.same(await pipe.run(settle, settleKeys, args), [first[0], 1, 960, 0, 0], 'a second settle replays the same entry id');
});

t.test('call() sends a plain command in order with the scripts; generation counts connections', async (t) => {
  const redis = await startRedis(t);
  if (!redis) return;
  const pipe = openPipe(t, { target: targetOf(redis) });
  await pipe.ready;
  t.equal(pipe.generation, 1, 'the first connection');
  const [added, seen] = await Promise.all([
    pipe.call(['ZADD', 'pipe:z', 5, 'm']),
    pipe.run(luaScript("return redis.call('ZSCORE', KEYS[1], ARGV[1])"), ['pipe:z'], ['m']),
  ]);
  t.strictSame([added, seen], [1, '5'], 'the script sent after the command in the same turn sees its write');
  await redis.client.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
  await waitFor(() => pipe.generation === 2, 5000, 'the reconnect');
  t.pass('a new connection is a new generation');
});

t.test('500 calls in one tick each resolve with their own reply, in order', async (t) => {
  const redis = await startRedis(t);
  if (!redis) return;
  const pipe = openPipe(t, { target: targetOf(redis) });
  await pipe.ready;
  for (const phase of ['script not cached yet (EVALSHA, NOSCRIPT, EVAL)', 'script cached (EVALSHA)']) {
    const order: number[] = [];
    const replies = await Promise.all(
      Array.from({ length: 500 }, (_, i) =>
        pipe.run(ECHO, [`k${i}`], [i]).then((r) => {
          order.push(i);
          return r;
        }),
      ),
    );
    const wrong = replies.flatMap((r, i) => (JSON.stringify(r) === JSON.stringify([1, i, `k${i}`]) ? [] : [`${i}: ${JSON.stringify(r)}`]));
    t.same(wrong, [], `${phase}: every call got its own reply`);
    t.same(
      order,
      Array.from({ length: 500 }, (_, i) => i),
      `${phase}: calls resolved in the order they were made`,
    );
  }
});

t.test('NOSCRIPT: after SCRIPT FLUSH the call falls back to EVAL once, which caches the script again', async (t) => {
  const redis = await startRedis(t);
  if (!redis) return;
  const pipe = openPipe(t, { target: targetOf(redis) });
  await pipe.ready;
  t.same(await pipe.run(ECHO, ['a'], [1]), [1, 1, 'a'], 'first call');
  t.equal(((await redis.client.script('EXISTS', ECHO.sha)) as number[])[0], 1, 'the first call cached the script');

  await redis.client.script('FLUSH');
  t.equal(((await redis.client.script('EXISTS', ECHO.sha)) as number[])[0], 0, 'flushed');
  const eval0 = await calls(redis.client, 'eval');
  const evalsha0 = await calls(redis.client, 'evalsha');
  t.same(await pipe.run(ECHO, ['b'], [2]), [1, 2, 'b'], 'the call after the flush succeeds');
  t.equal((await calls(redis.client, 'eval')) - eval0, 1, 'through exactly one EVAL');
  t.equal(((await redis.client.script('EXISTS', ECHO.sha)) as number[])[0], 1, 'the EVAL cached the script again');

  const eval1 = await calls(redis.client, 'eval');
  const evalsha1 = await calls(redis.client, 'evalsha');
  t.ok(evalsha1 > evalsha0, 'the EVAL followed a failed EVALSHA');
  t.same(await pipe.run(ECHO, ['c'], [3]), [1, 3, 'c'], 'a second call succeeds too');
  t.equal(await calls(redis.client, 'eval'), eval1, 'without another EVAL');
  t.equal((await calls(redis.client, 'evalsha')) - evalsha1, 1, 'by EVALSHA');
});

t.test('scripts: loaded in every handshake, so a restarted Redis sees no EVAL storm', async (t) => {
  const redis = await startRedis(t, { restartable: true });
  if (!redis) return;
  const pipe = openPipe(t, { target: { host: '127.0.0.1', port: redis.port }, scripts: [ECHO, SET] });
  await pipe.ready;
  t.same(await redis.client.script('EXISTS', ECHO.sha, SET.sha), [1, 1], 'both scripts are cached before any call');

  await redis.stop();
  await redis.start();
  t.ok(await waitFor(() => pipe.connected, 3000), 'the pipe reconnects to the restarted, empty server');
  const burst = await Promise.all(Array.from({ length: 50 }, (_, i) => pipe.run(ECHO, [`k${i}`], [i])));
  t.same(
    burst.filter((r, i) => JSON.stringify(r) !== JSON.stringify([1, i, `k${i}`])),
    [],
    'a burst of 50 calls right after: each gets its own reply',
  );
  t.equal(await calls(redis.client, 'eval'), 0, 'none of them fell back to EVAL');
  t.equal(await calls(redis.client, 'evalsha'), 50, 'all by EVALSHA');
});

t.test('scripts: a SCRIPT LOAD the server refuses is reported, not fatal; NOSCRIPT falls back to EVAL', async (t) => {
  if (!requireRedis(t, process.env, true)) return;
  const server = await startAuthServer(t, 'secret');
  const admin = await server.client();
  await admin.call('ACL', 'SETUSER', 'noscript', 'on', '>pw', '~*', '+@all', '-script');
  const errors: Error[] = [];
  const pipe = openPipe(t, {
    target: { host: '127.0.0.1', port: server.port, username: 'noscript', password: 'pw' },
    scripts: [ECHO],
    onError: (e) => errors.push(e),
  });
  await pipe.ready;
  t.match(
    errors.map((e) => e.message),
    [/refused SCRIPT LOAD .*NOPERM/],
    'the refusal reaches onError',
  );
  t.ok(pipe.connected, 'the connection stays up');
  t.same(await pipe.run(ECHO, ['n'], [7]), [1, 7, 'n'], 'calls work, through the EVAL fallback');
});

t.test('db selection: the pipe writes to its own DB', async (t) => {
  const redis = await startRedis(t, { restartable: true }); // own server: DB 3 is ours
  if (!redis) return;
  const pipe = openPipe(t, { target: { host: '127.0.0.1', port: redis.port, db: 3 } });
  await pipe.ready;
  t.equal(await pipe.run(SET, ['pipe:db'], ['three']), 'OK', 'the write succeeds');
  const db3 = redis.client.duplicate({ db: 3 });
  t.teardown(() => db3.disconnect());
  t.equal(await db3.get('pipe:db'), 'three', 'the key is in DB 3');
  t.equal(await redis.client.get('pipe:db'), null, 'and not in DB 0');
});

t.test('AUTH: password, user and password, wrong password, none', async (t) => {
  if (!requireRedis(t, process.env, true)) return;
  const server = await startAuthServer(t, 'secret');
  const host = '127.0.0.1';
  const admin = await server.client();

  const good = openPipe(t, { target: { host, port: server.port, password: 'secret' } });
  await good.ready;
  t.same(await good.run(ECHO, ['k'], [5]), [1, 5, 'k'], 'with the right password a call succeeds');

  const withDb = openPipe(t, { target: { host, port: server.port, password: 'secret', db: 3 } });
  await withDb.ready;
  t.equal(await withDb.run(SET, ['pipe:authdb'], ['x']), 'OK', 'password and db: the call succeeds behind both handshake replies');
  t.equal(await (await server.client(3)).get('pipe:authdb'), 'x', 'the key is in DB 3');
  t.equal(await admin.get('pipe:authdb'), null, 'and not in DB 0');

  await admin.call('ACL', 'SETUSER', 'alice', 'on', '>wonderland', '~*', '+@all');
  const user = openPipe(t, { target: { host, port: server.port, username: 'alice', password: 'wonderland' } });
  await user.ready;
  t.same(await user.run(ECHO, ['u'], [6]), [1, 6, 'u'], 'with a user and its password a call succeeds');
  t.match(String(await admin.call('CLIENT', 'LIST')), /user=alice /, 'the pipe is logged in as that user');

  // A long command timeout: a rejection well before it is the handshake failing, not the watchdog.
  const errors: Error[] = [];
  const wrong = openPipe(t, {
    target: { host, port: server.port, password: 'wrong' },
    commandTimeoutMs: 10_000,
    onError: (e) => errors.push(e),
  });
  const readyErr = await wrong.ready.then(
    () => undefined,
    (e: unknown) => e as Error,
  );
  t.match(readyErr?.message, /handshake failed: WRONGPASS/, 'with a wrong password `ready` rejects with the handshake failure');
  t.ok(readyErr instanceof PipeError, 'as a PipeError');
  t.ok(
    errors.some((e) => /handshake failed: WRONGPASS/.test(e.message)),
    'and onError hears of it (the store logs it)',
  );
  const { err, ms } = await rejection(wrong.run(ECHO, ['k'], [1]));
  t.match(err.message, /handshake failed|not connected/, 'a call rejects (handshake failure, or refused between attempts)');
  t.ok(ms < 1000, `and at once, not after the command timeout (${ms.toFixed(0)} ms)`);
  // A failed handshake does not count as a good connection: the retries back off (50 ms doubling to
  // 500 ms) instead of reconnecting every 50 ms.
  const connections = async () => Number(/total_connections_received:(\d+)/.exec(String(await admin.call('INFO', 'stats')))![1]);
  const before = await connections();
  await new Promise((r) => setTimeout(r, 2000));
  const attempts = (await connections()) - before;
  t.ok(attempts >= 2 && attempts <= 8, `the pipe keeps retrying, backing off: ${attempts} connections in 2 s (every 50 ms would be ~40)`);

  const none = openPipe(t, { target: { host, port: server.port }, commandTimeoutMs: 10_000 });
  await none.ready;
  t.match((await rejection(none.run(ECHO, ['k'], [1]))).err.message, /^NOAUTH/, 'without a password the server refuses the call');
});

t.test('fail fast while Redis is down, reconnect by itself when it is back', async (t) => {
  const redis = await startRedis(t, { restartable: true });
  if (!redis) return;
  const errors: Error[] = [];
  const pipe = openPipe(t, { target: { host: '127.0.0.1', port: redis.port }, commandTimeoutMs: 5000, onError: (e) => errors.push(e) });
  await pipe.ready;
  t.same(await pipe.run(ECHO, ['a'], [1]), [1, 1, 'a'], 'works before the outage');

  await redis.stop();
  const down = await rejection(pipe.run(ECHO, ['b'], [2]));
  t.ok(down.ms < 300, `a call rejects at once when the server is gone (${down.ms.toFixed(0)} ms), not after the 5 s timeout`);
  t.ok(down.err instanceof Error, 'with an error');
  t.ok(await waitFor(() => !pipe.connected, 500), 'connected is false');
  const refused = await rejection(pipe.run(ECHO, ['c'], [3]));
  t.match(refused.err.message, /not connected/, 'while disconnected a call is refused');
  t.equal((refused.err as PipeError).sent, false, 'and says it was never sent (a settle retry relies on it)');
  t.ok(refused.ms < 100, `without touching the network (${refused.ms.toFixed(0)} ms)`);
  t.ok(
    await waitFor(() => errors.some((e) => (e as NodeJS.ErrnoException).code === 'ECONNREFUSED'), 2000),
    'reconnect attempts run in the background and report their failures to onError',
  );

  await redis.start();
  t.ok(await waitFor(() => pipe.connected, 3000), 'the pipe reconnects by itself');
  t.same(await pipe.run(ECHO, ['d'], [4]), [1, 4, 'd'], 'and calls work again (on the restarted, empty server)');
});

t.test('a command unanswered past commandTimeoutMs fails, and the pipe recovers', async (t) => {
  const redis = await startRedis(t, { restartable: true }); // own server: the pause stops every client on it
  if (!redis) return;
  const errors: Error[] = [];
  const pipe = openPipe(t, { target: { host: '127.0.0.1', port: redis.port }, commandTimeoutMs: 200, onError: (e) => errors.push(e) });
  await pipe.ready;
  t.same(await pipe.run(ECHO, ['a'], [1]), [1, 1, 'a'], 'works before the pause');

  await redis.client.call('CLIENT', 'PAUSE', '1500', 'ALL');
  let connectedAtFailure: boolean | undefined;
  const first = pipe.run(ECHO, ['b'], [2]);
  first.catch(() => (connectedAtFailure = pipe.connected));
  const behind = [pipe.run(ECHO, ['c'], [3]), pipe.run(ECHO, ['d'], [4])];
  const { err, ms } = await rejection(first);
  t.match(err.message, /timed out after 200 ms/, 'the call rejects with a timeout');
  t.ok(err instanceof PipeError, 'as a PipeError');
  t.equal((err as PipeError).sent, true, 'that was sent: it may still run (a settle retry must say so)');
  t.ok(ms >= 150 && ms < 1000, `about commandTimeoutMs after the call (${ms.toFixed(0)} ms), long before the pause ends`);
  t.equal(connectedAtFailure, false, 'the stuck connection is dropped');
  for (const p of behind) t.match((await rejection(p, 100)).err.message, /timed out/, 'the calls queued behind it fail with it');
  t.ok(
    errors.some((e) => e === err),
    'onError got the timeout',
  );

  await redis.client.ping(); // answered once the pause is over
  t.ok(await waitFor(() => pipe.connected, 3000), 'the pipe has reconnected');
  t.same(await pipe.run(ECHO, ['e'], [5]), [1, 5, 'e'], 'and works again after the pause');
});

t.test('close(): calls in flight and later calls reject, and it stays closed', async (t) => {
  const redis = await startRedis(t, { restartable: true }); // own server: counts its clients
  if (!redis) return;
  const pipe = createScriptPipe({ target: { host: '127.0.0.1', port: redis.port }, commandTimeoutMs: 5000 });
  t.teardown(() => pipe.close());
  await pipe.ready;
  const SLOW = luaScript(
    "local t0 = redis.call('TIME') repeat local t = redis.call('TIME') until (t[1] - t0[1]) * 1e6 + (t[2] - t0[2]) > 1000000 return 1",
  );
  t.equal(await pipe.run(SLOW, [], []), 1, 'the slow script works');
  const clientsBefore = await connectedClients(redis.client);

  const inFlight = pipe.run(SLOW, [], []);
  await sleep(50); // on the wire and running on the server (for 1 s)
  pipe.close();
  const { err, ms } = await rejection(inFlight, 2000);
  t.match(err.message, /closed/, 'a call in flight rejects on close()');
  t.ok(ms < 300, `at once, not when the server answers (${ms.toFixed(0)} ms)`);
  t.notOk(pipe.connected, 'not connected after close()');
  t.match((await rejection(pipe.run(ECHO, ['x'], [1]), 100)).err.message, /not connected/, 'a later call rejects');

  await sleep(300); // several reconnect backoffs (50 ms and up): none may happen
  t.notOk(pipe.connected, 'a closed pipe does not reconnect');
  let clientsAfter = clientsBefore;
  for (const deadline = Date.now() + 2000; clientsAfter !== clientsBefore - 1 && Date.now() < deadline; await sleep(10)) {
    clientsAfter = await connectedClients(redis.client);
  }
  t.equal(clientsAfter, clientsBefore - 1, 'its connection is gone from the server');
});

/** Runs `body` in a fresh Node process (script-pipe imported as `pipeModule`); its exit code and stdout, or null if it had not exited after `boundMs`. */
async function inChild(t: Test, body: string, boundMs: number): Promise<{ code: number | null; stdout: string } | null> {
  const src = `import * as pipeModule from ${JSON.stringify(new URL('../../src/store/script-pipe.ts', import.meta.url).href)};\n${body}`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', src], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
  child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
  const exited = once(child, 'exit');
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), boundMs);
  const [code, signal] = (await exited) as [number | null, NodeJS.Signals | null];
  clearTimeout(timer);
  if (signal === 'SIGKILL') return null;
  if (code !== 0) t.comment(`child stderr: ${stderr}`);
  return { code, stdout };
}

t.test('close() before the connection opened: ready rejects instead of hanging', async (t) => {
  const port = await freePort();
  const pipe = createScriptPipe({ target: { host: '127.0.0.1', port }, commandTimeoutMs: 2000 });
  pipe.close();
  const err = await pipe.ready.then(
    () => undefined,
    (e: unknown) => e as Error,
  );
  t.match(err?.message, /closed/, '`ready` rejects with the close');
});

t.test('close(): nothing the pipe made keeps the process alive', async (t) => {
  const redis = await startRedis(t);
  if (!redis) return;
  const open = `
    const { createScriptPipe, luaScript } = pipeModule;
    const pipe = createScriptPipe({ target: { host: '127.0.0.1', port: ${redis.port} }, commandTimeoutMs: 1000 });
    await pipe.ready;
    const r = await pipe.run(luaScript('return 7'), [], []);
    const p = pipe.run(luaScript('return 8'), [], []).then(() => 'resolved', (e) => e.message);`;

  const control = await inChild(t, `${open}\nconsole.log(r);`, 1500);
  t.equal(control, null, 'control: an open pipe keeps the process alive (so the check below can fail)');

  const closed = await inChild(t, `${open}\npipe.close();\nconsole.log(JSON.stringify({ r, p: await p }));`, 5000);
  t.ok(closed, 'after close() the process exits by itself (no timer or socket left)');
  t.equal(closed?.code, 0, 'cleanly');
  t.same(JSON.parse(closed?.stdout || 'null'), { r: 7, p: 'redis pipe closed' }, 'after a call that worked and one that close() rejected');

  const deadPort = await freePort();
  const reconnecting = await inChild(
    t,
    `const { createScriptPipe } = pipeModule;
    const errors = [];
    const pipe = createScriptPipe({ target: { host: '127.0.0.1', port: ${deadPort} }, commandTimeoutMs: 1000, onError: (e) => errors.push(e.code) });
    await pipe.ready.catch(() => {});
    await new Promise((r) => setTimeout(r, 200));
    pipe.close();
    console.log(JSON.stringify(errors.length > 1));`,
    5000,
  );
  t.ok(reconnecting, 'closed while reconnecting to a dead port: the process exits by itself');
  t.equal(reconnecting?.stdout.trim(), 'true', 'after several failed reconnect attempts');
});

/** A fake Redis on loopback: `onData` sees each chunk a connection receives and may answer on it. */
async function fakeServer(
  t: Test,
  onData: (s: Socket, chunk: string, conn: number) => void,
): Promise<{ port: number; connections: number }> {
  const state = { port: 0, connections: 0 };
  const sockets = new Set<Socket>();
  const server = createServer((s) => {
    const conn = ++state.connections;
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => {});
    s.on('data', (b: Buffer) => onData(s, b.toString('utf8'), conn));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  state.port = (server.address() as { port: number }).port;
  t.teardown(async () => {
    for (const s of sockets) s.destroy();
    server.close();
    await once(server, 'close');
  });
  return state;
}

/** A ready pipe to a fake server that answers every EVALSHA with 1 and keeps each chunk it read. */
async function recordedPipe(t: Test): Promise<{ pipe: ScriptPipe; chunks: string[] }> {
  const chunks: string[] = [];
  const server = await fakeServer(t, (s, chunk) => {
    chunks.push(chunk);
    s.write(':1\r\n'.repeat(chunk.split('EVALSHA').length - 1));
  });
  const pipe = openPipe(t, { target: { host: '127.0.0.1', port: server.port } });
  await pipe.ready;
  return { pipe, chunks };
}

t.test('calls made in one tick go out in one write', async (t) => {
  const { pipe, chunks } = await recordedPipe(t);
  const replies = await Promise.all(Array.from({ length: 20 }, (_, i) => pipe.run(ECHO, [`k${i}`], [i])));
  t.same(replies, Array(20).fill(1), 'each call got a reply');
  t.equal(chunks.length, 1, 'the server received one chunk');
  t.equal(chunks[0]!.split('*5\r\n$7\r\nEVALSHA\r\n').length - 1, 20, 'holding all 20 commands');
});

t.test('a call is written in its own loop turn, never held back for a later call', async (t) => {
  // A settle once waited up to 1 ms to share the next hold's write; Redis then ran it before that hold
  // and the hold's reply came later. Every call now goes out in the turn it was made in.
  const { pipe, chunks } = await recordedPipe(t);
  const first = pipe.run(SET, ['settled'], ['x']);
  await new Promise<void>((resolve) => setImmediate(resolve));
  const second = pipe.run(ECHO, ['hold'], [1]);
  t.same(await Promise.all([first, second]), [1, 1], 'both answered');
  t.equal(chunks.length, 2, 'two writes, one per turn');
  t.match(chunks[0]!, /settled/, 'the first call went out alone, before the second was made');
  t.notMatch(chunks[0]!, /hold/);
});

t.test('a reply the pipe cannot read drops the connection, and it reconnects', async (t) => {
  const server = await fakeServer(t, (s, _chunk, conn) => {
    s.write(conn === 1 ? '?garbage\r\n' : ':5\r\n');
  });
  const errors: Error[] = [];
  const pipe = openPipe(t, { target: { host: '127.0.0.1', port: server.port }, onError: (e) => errors.push(e) });
  await pipe.ready;
  const { err } = await rejection(pipe.run(ECHO, ['k'], [1]), 1000);
  t.match(err.message, /unexpected RESP type byte 0x3f/, 'the call rejects with the protocol error');
  t.ok(await waitFor(() => server.connections === 2 && pipe.connected, 2000), 'the pipe opened a new connection');
  t.equal(await pipe.run(ECHO, ['k'], [1]), 5, 'which works');
});

t.test('a reply nobody asked for drops the connection rather than answering the next call with it', async (t) => {
  const server = await fakeServer(t, (s, _chunk, conn) => {
    s.write(':5\r\n');
    if (conn === 1) s.write(':666\r\n'); // one reply too many on the first connection
  });
  const pipe = openPipe(t, { target: { host: '127.0.0.1', port: server.port } });
  await pipe.ready;
  t.equal(await pipe.run(ECHO, ['k'], [1]), 5, 'the call gets the first reply');
  t.ok(await waitFor(() => server.connections === 2, 2000), 'the extra reply made the pipe reconnect');
  t.ok(await waitFor(() => pipe.connected, 2000), 'connected again');
  t.equal(await pipe.run(ECHO, ['k'], [1]), 5, 'the next call gets its own reply, not the stray one');
});
