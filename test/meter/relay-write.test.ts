import t from 'tap';
import { createServer, request, type ServerResponse } from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { writeOut } from '../../src/meter/relay.ts';

/** A real loopback response: `handle` gets it once the client has asked; the client reads everything. */
async function withResponse(handle: (res: ServerResponse) => Promise<void>): Promise<string> {
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    handle(res).then(() => res.end(), (err) => res.destroy(err));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  try {
    const { port } = server.address() as AddressInfo;
    const req = request({ port, host: '127.0.0.1' });
    req.end();
    const [res] = (await once(req, 'response')) as [import('node:http').IncomingMessage];
    let body = '';
    res.setEncoding('latin1').on('data', (c: string) => (body += c));
    await once(res, 'end');
    return body;
  } finally {
    server.close();
  }
}

t.test('several parts: false only while a drain is still to come, and the drain then comes', async (t) => {
  // Past the response's high-water mark while corked (so each write says false), yet small enough
  // for the loopback socket to take at once on uncork, which is when Node emits 'drain' itself.
  const part = (c: string) => Buffer.alloc(48 * 1024, c);
  const results: boolean[] = [];
  const body = await withResponse(async (res) => {
    for (const c of 'abcd') {
      const ok = writeOut(res, [part(c), part(c.toUpperCase())]);
      results.push(ok);
      t.ok(ok || res.writableNeedDrain, `write ${c}: a false is followed by a drain`);
      if (!ok) {
        const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error('no drain after a false write')), 2000).unref());
        await Promise.race([once(res, 'drain'), timeout]);
      }
    }
  });
  t.equal(body.length, 4 * 2 * 48 * 1024, 'every part arrived');
  t.equal(body.slice(0, 3) + body.slice(48 * 1024, 48 * 1024 + 3), 'aaaAAA', 'in order');
  t.equal(results.length, 4);
});

t.test('one buffer is written as it is', async (t) => {
  const body = await withResponse(async (res) => {
    t.equal(writeOut(res, Buffer.from('data: x\n\n')), true);
  });
  t.equal(body, 'data: x\n\n');
});
