/** Per-request state that travels down the route's pipeline and into the request's log line. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { KeyRecord } from '../store/types.ts';
import type { Admission } from '../limits/limits.ts';

export interface RequestContext {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly requestId: string;
  /** process.hrtime.bigint() when the request arrived. */
  readonly start: bigint;
  /** Route pattern, a bounded metric label (`/v1/shares/{slug}`, never the slug). */
  route: string;
  params: Record<string, string>;
  /** Set by authentication. */
  key: KeyRecord | undefined;
  /**
   * The request's single log line (SPEC §7): the edge's leading fields, then what the route adds (tokens,
   * cost, upstream, timings…); written as this object once the request is over (server.ts finish()).
   */
  log: Record<string, unknown>;
  /**
   * The gateway's own time on a proxied request (SPEC §7): arrival → upstream call, plus time spent on
   * each chunk and on settling, upstream waiting excluded. Measured by the route; undefined elsewhere.
   */
  overheadNs: bigint | undefined;
  /** Headers every response of this request carries (x-ratelimit-*). */
  extraHeaders: Record<string, string> | undefined;
  /** Set by the gate on `meteredAdmit` routes: admits the request with its token estimate (http/gate.ts). */
  admit: ((this: RequestContext, estimatedTokens?: number) => Promise<Admission>) | undefined;
}

/** A route handler; throws GatewayError/ValidationError, which the edge turns into a body. */
export type Handler = (ctx: RequestContext) => Promise<void>;
