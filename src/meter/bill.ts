/**
 * What a request is billed (SPEC §1.2): the upstream's usage when it reported one, else the tokenizer
 * over the prompt and what was produced, counted in bounded slices (SPEC §12). Shared by every metered
 * endpoint (routes/metered.ts); `countPrompt` re-reads the prompt from the upstream payload (the parsed
 * body is not kept: SPEC §12), only on the rare path where the upstream reported no usage.
 */
import type { RelayOutcome } from './relay.ts';
import { COUNT_BUDGET_MS, type Budget, type Tokenizer } from './tokenizer.ts';
import type { UsageSource } from '../store/types.ts';

export interface Billed {
  promptTokens: number;
  completionTokens: number;
  source: UsageSource;
}

/** No answer from any upstream, or a refusal: nothing was produced. */
export const NOTHING_PRODUCED: Billed = { promptTokens: 0, completionTokens: 0, source: 'estimated' };

/** `promptEstimate` is the hold's byte bound; `maxOutput` what the request was held for. */
export async function bill(
  tokenizer: Tokenizer,
  countPrompt: (budget: Budget) => Promise<number>,
  promptEstimate: number,
  answered: boolean,
  outcome: RelayOutcome | undefined,
  maxOutput: number,
): Promise<Billed> {
  // No answer from any upstream (or a refusal): nothing was produced, nothing is billed.
  if (!answered || !outcome) return NOTHING_PRODUCED;
  // A body too large to keep, without usage: its text was relayed, not kept. Bill what the request was
  // allowed to produce (the clamped output × choices it was held for), never 0 for want of a buffer.
  if (!outcome.usage && outcome.uncounted) return { promptTokens: promptEstimate, completionTokens: maxOutput, source: 'estimated' };
  const extra = outcome.text();
  // The tokenizer (tens of MB and a fraction of a second to load: docs/notes.md §8) is only needed when
  // usage is missing. The gateway loads it before it reports ready (admin/warm-up.ts); here only when that failed.
  // If it cannot load, bytes bound the tokens from above: over-billed at worst, never unbilled.
  if ((!outcome.usage || extra) && !tokenizer.loaded) await tokenizer.load().catch(() => {});
  // Counted in bounded slices with the event loop served between them (SPEC §12), one deadline per request.
  const budget = { deadline: Date.now() + COUNT_BUDGET_MS }; // wall time on this CPU, not the business clock
  const countText = (s: string) => (tokenizer.loaded ? tokenizer.countTextBounded(s, budget) : Promise.resolve(Buffer.byteLength(s)));
  if (outcome.usage) {
    const more = extra ? await countText(extra) : 0;
    return {
      promptTokens: outcome.usage.prompt_tokens,
      completionTokens: outcome.usage.completion_tokens + more,
      source: more > 0 ? 'estimated' : 'upstream',
    };
  }
  const prompt = tokenizer.loaded ? await countPrompt(budget) : promptEstimate;
  return { promptTokens: prompt, completionTokens: extra ? await countText(extra) : 0, source: 'estimated' };
}
