/**
 * The rate-limit seam of the request path (SPEC §1.5). `admit` counts a request (and, for chat, the
 * token estimate) against the key's limits, throws 429 `rate_limit_exceeded` past them, and puts the
 * `x-ratelimit-*` headers on the context; the returned admission corrects the token count with the real
 * usage when the request settles.
 */
import type { RequestContext } from '../http/context.ts';

export interface Admission {
  /** Replaces the admitted token estimate with the real usage. */
  settle(actualTokens: number): void;
}

export interface Limits {
  admit(ctx: RequestContext, estimatedTokens?: number): Promise<Admission>;
  close?(): Promise<void>;
}
