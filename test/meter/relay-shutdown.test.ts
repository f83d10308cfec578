// A stream cut at the drain deadline (SPEC §14): the route aborts its upstream call with shuttingDown(); the
// relay writes the events already received, then the API's own error event with code `shutting_down` and
// no [DONE], and reports `shutting_down` (not an upstream failure: no ejection) with the text produced, so it
// is billed for it. Any other upstream error still ends with the upstream_error event.
import t from 'tap';
import { request, type IncomingMessage } from 'node:http';
import { once } from 'node:events';
import { relaySse, shuttingDown, type RelayOutcome } from '../../src/meter/relay.ts';
import { CHAT, RESPONSES, type ApiFormat } from '../../src/meter/formats.ts';
import { relayOnLoopback } from './relay-fixture.ts';
import { event } from './sse-fixture.ts';
import { sseData } from '../e2e/chat-fixture.ts';

/** Relays `first`, then fails the call with `reason` (as undici does with an abort's reason); returns what the client got. */
async function cut(format: ApiFormat, first: string, reason: Error): Promise<{ body: string; outcome: RelayOutcome }> {
  const { call, controller, url, outcome, close } = await relayOnLoopback((call, res) => relaySse(call, res, true, () => false, format));
  try {
    const req = request(url);
    req.end();
    const [res] = (await once(req, 'response')) as [IncomingMessage];
    let body = '';
    res.setEncoding('utf8').on('data', (s: string) => (body += s));
    call.onResponseData(controller, Buffer.from(first));
    await new Promise((r) => setTimeout(r, 20));
    call.onResponseError(controller, reason);
    await once(res, 'end');
    return { body, outcome: await outcome };
  } finally {
    close();
  }
}

t.test('chat: the shutting_down error chunk, no [DONE], the text produced', async (t) => {
  const first = event({ choices: [{ delta: { content: 'hello world' } }] });
  const { body, outcome } = await cut(CHAT, first, shuttingDown());
  t.ok(body.startsWith(first), 'the events received go out first');
  const data = sseData(body);
  t.notOk(data.includes('[DONE]'));
  t.same(JSON.parse(data.at(-1)!), {
    error: { message: shuttingDown().message, type: 'server_error', code: 'shutting_down', param: null },
  });
  t.equal(outcome.end, 'shutting_down');
  t.equal(outcome.text(), 'hello world', 'what was produced is there to bill');
});

t.test('responses: its own error event with the shutting_down code', async (t) => {
  const first = `event: response.output_text.delta\n${event({ type: 'response.output_text.delta', delta: 'partial' })}`;
  const { body, outcome } = await cut(RESPONSES, first, shuttingDown());
  t.match(body, /event: error\ndata: \{"type":"error","code":"shutting_down","message":"[^"]+","param":null\}\n\n$/);
  t.equal(outcome.end, 'shutting_down');
  t.equal(outcome.text(), 'partial');
});

t.test('any other failure is still the upstream_error event', async (t) => {
  const { body, outcome } = await cut(CHAT, event({ choices: [{ delta: { content: 'x' } }] }), new Error('socket hang up'));
  t.match(JSON.parse(sseData(body).at(-1)!), { error: { code: 'upstream_error' } });
  t.equal(outcome.end, 'upstream_failed');
});
