/**
 * The rate-limit seam of the request path (SPEC §1.5, §13). `admit` counts a request (and, with an
 * estimate, its tokens) against the key's and its account's limits at once; a metered route splits it
 * in two: `admitRequest` before the body is read, `admitTokens` once the estimate is known. Each throws
 * 429 `rate_limit_exceeded` past a limit (`x-ratelimit-scope` names which) and puts the `x-ratelimit-*`
 * headers on the context; an admission of tokens is corrected with the real usage when the request settles.
 */
import type { RequestContext } from '../http/context.ts';

export interface Admission {
  /** Replaces the admitted token estimate with the real usage. */
  settle(actualTokens: number): void;
}

export interface Limits {
  /** The request and, with an estimate, its tokens: one round trip. */
  admit(ctx: RequestContext, estimatedTokens?: number): Promise<Admission>;
  /** The request dimension only (key and account), before any byte of the body is read. */
  admitRequest(ctx: RequestContext): Promise<void>;
  /** The token dimension only (key and account), once the estimate is known. */
  admitTokens(ctx: RequestContext, estimatedTokens: number): Promise<Admission>;
  close?(): Promise<void>;
}
