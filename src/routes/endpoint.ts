/**
 * What differs between two metered endpoints: the declaration routes/metered.ts turns into a route
 * (routes/chat-completions.ts, responses.ts, completions.ts, embeddings.ts).
 */
import type { Config, Endpoint, ModelConfig } from '../config/schema.ts';
import type { RouteDoc } from '../http/openapi.ts';
import type { ApiFormat } from '../meter/formats.ts';
import type { Budget, Tokenizer } from '../meter/tokenizer.ts';
import type { StatefulRequest } from '../meter/bill.ts';

export type { StatefulRequest } from '../meter/bill.ts';
import type { Scope } from '../store/types.ts';

/** The output a request may produce: per choice (sent upstream as its cap) and in all (what is held). */
export interface OutputBound {
  perChoice: number;
  total: number;
}

/** What differs between two metered endpoints. `B` is the validated body. */
export interface MeteredEndpoint<B extends { model: string }> {
  /** The name models list in `models[].endpoints`. */
  endpoint: Endpoint;
  scope: Scope;
  /** The public path, e.g. `/v1/chat/completions`. */
  pattern: string;
  /** The path below the upstream's base URL, e.g. `/chat/completions`. */
  upstreamPath: string;
  doc: RouteDoc;
  /** Where the upstream's answer keeps usage and text. */
  format: ApiFormat;
  /** The validated body, or a ValidationError (422) listing its first problems (at most MAX_ISSUES). */
  validate(value: unknown, limits: Config['limits']): B;
  /** The output bound of the hold (SPEC §12: the request's maximum clamped to the model's cap, never refused). */
  output(body: B, model: ModelConfig): OutputBound;
  /** An upper bound on the prompt's tokens, from the body alone (credit/hold-estimate.ts). */
  estimatePrompt(body: B, bodyBytes: number): number;
  /** The upstream body: model rewritten, output capped at `perChoice`, usage asked for. Once per request. */
  payload(body: B, model: ModelConfig, perChoice: number): Buffer;
  /**
   * Whether the client asked for a stream, and for the usage-only chunk the gateway may have forced on;
   * `severalChoices` when it asked for more than one choice in all (meter/sse-scanner.ts SseMeterOptions);
   * `echo` when the answer's text starts with the prompt (vLLM's completions `echo`), so that without
   * usage its text cannot be counted as completion: billed as `uncounted` (meter/relay.ts RelayOutcome).
   */
  reply(body: B): { stream: boolean; wantsUsage: boolean; severalChoices?: boolean; echo?: boolean };
  /** Prompt tokens by the fallback tokenizer, re-read from the upstream payload (usage missing: the rare path). */
  countPrompt(payload: Buffer, tokenizer: Tokenizer, budget: Budget): Promise<number>;
  /** Whether the request is stateful, and what that changes; undefined for the (usual) stateless one. */
  stateful?(body: B, model: ModelConfig, promptEstimate: number): StatefulRequest | undefined;
}

/** The OpenAPI answers every metered endpoint shares; `ok` describes its 200. */
export function meteredResponses(ok: string, scope: Scope, pattern: string): RouteDoc['responses'] {
  return {
    200: { description: ok, schema: { type: 'object' } },
    401: 'Missing or invalid key',
    402: 'Not enough credit for the hold',
    403: `Key lacks the ${scope} scope or the model`,
    404: `Unknown model, or a model that does not serve ${pattern}`,
    408: 'Body not received within server.body_timeout_ms',
    413: 'Body over limits.max_body_bytes',
    415: 'Not application/json',
    422: 'Invalid body',
    429: 'Rate, concurrency, body-budget or failed-auth limit of the key or its account (x-ratelimit-scope)',
    502: 'Upstream failed',
    503: 'Upstream unavailable, store unavailable or overloaded',
    504: 'Upstream timed out',
  };
}
