// The relay on a real loopback response, fed by hand: an UpstreamCall whose answer (200, text/event-stream)
// has started, and a server whose one response the relay writes. The test feeds the call chunk by chunk
// (call.onResponseData / onResponseEnd / onResponseError) and reads what a client got at `url`.
import { createServer, type ServerResponse } from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import type { Dispatcher } from 'undici';
import type { RelayOutcome } from '../../src/meter/relay.ts';
import { UpstreamCall } from '../../src/upstream/call.ts';
import type { Upstream } from '../../src/upstream/pool.ts';

export interface LoopbackRelay {
  call: UpstreamCall;
  /** A controller that ignores abort, pause and resume. */
  controller: Dispatcher.DispatchController;
  /** The server; its first request gets the relayed stream. */
  url: string;
  /** What `relay` resolved with, once the relay is done. */
  outcome: Promise<RelayOutcome>;
  close(): void;
}

/**
 * Starts the call and a server whose response is handed to `relay` (e.g. relaySse with the arguments
 * under test) once its headers are flushed, as the route does when no body came with the upstream's
 * headers. The caller closes it (`close()`, or at its teardown).
 */
export async function relayOnLoopback(relay: (call: UpstreamCall, res: ServerResponse) => Promise<RelayOutcome>): Promise<LoopbackRelay> {
  const controller = { abort() {}, pause() {}, resume() {} } as unknown as Dispatcher.DispatchController;
  const call = new UpstreamCall({ label: 'sim' } as Upstream);
  call.onRequestStart(controller);
  call.onResponseStart(controller, 200, { 'content-type': 'text/event-stream' });
  let settle!: (p: Promise<RelayOutcome>) => void;
  const outcome = new Promise<RelayOutcome>((resolve) => (settle = resolve));
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.flushHeaders();
    settle(relay(call, res));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { call, controller, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, outcome, close: () => server.close() };
}
