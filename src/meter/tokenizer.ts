/**
 * Fallback token counts (SPEC §1.2: used only when the upstream reports no usage), with gpt-tokenizer's
 * o200k_base encoding. The upstream's own tokenizer is unknown, so these are estimates and are recorded
 * with `usage_source: "estimated"`.
 *
 * Loading costs 126–312 ms and +67 MB RSS (NOTES §8), so the module is imported lazily, once, by
 * `load()` (call it at boot), and warmed up: the first calls after a cold start run ~10× slower.
 * Counting is synchronous afterwards. Text containing special-token strings such as `<|endoftext|>` is
 * counted as ordinary text, never rejected.
 */

import { partText } from '../credit/hold-estimate.ts';

/** The part of gpt-tokenizer we use; injectable so tests can observe loading. */
export interface TokenizerModule {
  countTokens(text: string, opts?: { disallowedSpecial?: Set<string> }): number;
}

export interface TokenizerOptions {
  /** Defaults to `import('gpt-tokenizer/model/gpt-4o')` (o200k_base). */
  importModule?: () => Promise<TokenizerModule>;
}

/** A lazily loaded token counter; counting before `load()` resolves throws (code TOKENIZER_NOT_LOADED). */
export interface Tokenizer {
  /** Imports and warms up the encoder; idempotent, concurrent calls share one import. */
  load(): Promise<void>;
  readonly loaded: boolean;
  /** Tokens of plain text (completion text). Synchronous: for short texts (tests, benchmarks). */
  countText(text: string): number;
  /** Prompt tokens of a chat `messages` array, chat-format overhead included (see countMessages). */
  countPromptTokens(messages: readonly unknown[]): number;
  /**
   * The same counts for the request path (SPEC §12: no request blocks the event loop): text is counted
   * in slices of SLICE_CHARS with the event loop served between them, runs of non-space longer than
   * MAX_RUN are cut (BPE is quadratic in one pre-token's length: a 200 k-character word took 28 s whole),
   * and past `budgetMs` of wall time the rest is counted as its UTF-8 bytes, an upper bound.
   */
  countTextBounded(text: string, budget?: Budget): Promise<number>;
  countPromptTokensBounded(messages: readonly unknown[], budget?: Budget): Promise<number>;
}

/** A wall-clock deadline shared by the counts of one request. */
export interface Budget {
  deadline: number;
}

/** Characters counted between two turns of the event loop: ~3 ms for random symbols, ~0.2 ms for prose (1 MB measured). */
export const SLICE_CHARS = 4096;
/** Longest run of non-space characters counted as one piece. */
export const MAX_RUN = 200;
/** Wall time one request's fallback counting may take before the byte bound takes over. */
export const COUNT_BUDGET_MS = 2000;

const LONG_RUN = new RegExp(`\\S{${MAX_RUN + 1}}`);
const yieldToLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Chat-format overhead, as OpenAI's cookbook and gpt-tokenizer's countChatCompletionTokens count it:
 * 3 tokens per message (<|im_start|>, separator, <|im_end|>), 1 more when a `name` is present, 3 per
 * tool call, and 3 to prime the reply. Exported so the credit hold can prove it covers them.
 */
export const CHAT_OVERHEAD = { perMessage: 3, perName: 1, perToolCall: 3, perRequest: 3 } as const;

/**
 * An incoming message's reasoning, as a client replays it: `reasoning_content` (vLLM < 0.10, DeepSeek) or
 * `reasoning` (vLLM ≥ 0.10), the longer when a client sends both (an alias of the same text, as the meter
 * counts an answer's: meter/data-scan.ts ReasoningPair). Templates that render it (Qwen3 for the turns
 * after the last user message) put it in the prompt, so the fallback count counts it, as the hold does
 * (credit/hold-estimate.ts): a client cannot replay a long reasoning text, leave before the usage, and be
 * billed without it. A template that drops it makes this an over-count, only when the usage is missing.
 */
function replayedReasoning(msg: Record<string, unknown>): unknown {
  const a = msg['reasoning_content'];
  const b = msg['reasoning'];
  if (typeof a !== 'string') return b;
  if (typeof b !== 'string') return a;
  return b.length > a.length ? b : a;
}

/** Special-token strings in user text are plain text to us: never throw on `<|endoftext|>` (NOTES §8). */
const AS_TEXT = { disallowedSpecial: new Set<string>() };

/** Warm-up text: prose, code, digits, CJK and emoji, so every regex branch and merge path is compiled. */
const WARMUP = 'The quick brown fox, 12345 times. function f(x) { return x * 2; }\n\t日本語のテキスト 😀 '.repeat(40);

function defaultImport(): Promise<TokenizerModule> {
  return import('gpt-tokenizer/model/gpt-4o');
}

class LazyTokenizer implements Tokenizer {
  private mod: TokenizerModule | null = null;
  private loading: Promise<void> | null = null;
  private readonly importModule: () => Promise<TokenizerModule>;

  constructor(opts: TokenizerOptions) {
    this.importModule = opts.importModule ?? defaultImport;
  }

  get loaded(): boolean {
    return this.mod !== null;
  }

  load(): Promise<void> {
    this.loading ??= this.importModule().then(
      (mod) => {
        for (let i = 0; i < 20; i++) mod.countTokens(WARMUP, AS_TEXT);
        this.mod = mod;
      },
      (err: unknown) => {
        this.loading = null; // allow a retry
        throw err;
      },
    );
    return this.loading;
  }

  countText(text: string): number {
    return text.length === 0 ? 0 : this.module().countTokens(text, AS_TEXT);
  }

  countPromptTokens(messages: readonly unknown[]): number {
    const mod = this.module();
    const count = (s: unknown): number => (typeof s === 'string' && s.length > 0 ? mod.countTokens(s, AS_TEXT) : 0);
    let total = CHAT_OVERHEAD.perRequest;
    for (const m of messages) {
      if (typeof m !== 'object' || m === null) continue;
      const msg = m as Record<string, unknown>;
      total += CHAT_OVERHEAD.perMessage + count(msg['role']);
      const content = msg['content'];
      if (typeof content === 'string') total += count(content);
      else if (Array.isArray(content)) {
        // Text parts only (credit/hold-estimate.ts partText): images, audio and files have no text the tokenizer can see.
        for (const part of content) {
          if (typeof part === 'object' && part !== null) total += count(partText(part as Record<string, unknown>));
        }
      }
      if (typeof msg['name'] === 'string' && msg['name'].length > 0) total += count(msg['name']) + CHAT_OVERHEAD.perName;
      total += count(msg['refusal']) + count(replayedReasoning(msg));
      const calls = msg['tool_calls'];
      if (Array.isArray(calls)) {
        for (const call of calls) {
          const fn = (call as { function?: { name?: unknown; arguments?: unknown } } | null)?.function;
          total += CHAT_OVERHEAD.perToolCall + count(fn?.name) + count(fn?.arguments);
        }
      }
    }
    return total;
  }

  async countTextBounded(text: string, budget: Budget = { deadline: Date.now() + COUNT_BUDGET_MS }): Promise<number> {
    if (text.length === 0) return 0;
    const mod = this.module();
    let total = 0;
    for (let i = 0; i < text.length; i += SLICE_CHARS) {
      if (i > 0) await yieldToLoop();
      const slice = text.slice(i, i + SLICE_CHARS);
      if (Date.now() > budget.deadline) {
        total += Buffer.byteLength(text.slice(i));
        break;
      }
      if (!LONG_RUN.test(slice)) total += mod.countTokens(slice, AS_TEXT);
      else for (let j = 0; j < slice.length; j += MAX_RUN) total += mod.countTokens(slice.slice(j, j + MAX_RUN), AS_TEXT);
    }
    return total;
  }

  async countPromptTokensBounded(
    messages: readonly unknown[],
    budget: Budget = { deadline: Date.now() + COUNT_BUDGET_MS },
  ): Promise<number> {
    const count = (s: unknown) => (typeof s === 'string' && s.length > 0 ? this.countTextBounded(s, budget) : Promise.resolve(0));
    let total = CHAT_OVERHEAD.perRequest;
    for (const m of messages) {
      if (typeof m !== 'object' || m === null) continue;
      const msg = m as Record<string, unknown>;
      total += CHAT_OVERHEAD.perMessage + (await count(msg['role']));
      const content = msg['content'];
      if (typeof content === 'string') total += await count(content);
      else if (Array.isArray(content)) {
        for (const part of content) {
          if (typeof part === 'object' && part !== null) total += await count(partText(part as Record<string, unknown>));
        }
      }
      if (typeof msg['name'] === 'string' && msg['name'].length > 0) total += (await count(msg['name'])) + CHAT_OVERHEAD.perName;
      total += (await count(msg['refusal'])) + (await count(replayedReasoning(msg)));
      const calls = msg['tool_calls'];
      if (Array.isArray(calls)) {
        for (const call of calls) {
          const fn = (call as { function?: { name?: unknown; arguments?: unknown } } | null)?.function;
          total += CHAT_OVERHEAD.perToolCall + (await count(fn?.name)) + (await count(fn?.arguments));
        }
      }
    }
    return total;
  }

  private module(): TokenizerModule {
    if (this.mod !== null) return this.mod;
    throw Object.assign(new Error('tokenizer used before load() resolved'), { code: 'TOKENIZER_NOT_LOADED' });
  }
}

/** Creates a tokenizer; nothing is imported until `load()`. */
export function createTokenizer(opts: TokenizerOptions = {}): Tokenizer {
  return new LazyTokenizer(opts);
}
