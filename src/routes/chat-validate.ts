/**
 * Validation of a chat completions body (SPEC §1.2), Pydantic-style 422s. Only the fields Tollgate acts
 * on are checked; every other field passes through untouched.
 */
import { Issues, bool, int, isObj, list, literal, rootObject, str, type Obj } from '../http/validate.ts';

export const ROLES = ['system', 'developer', 'user', 'assistant', 'tool'] as const;

export interface ChatBody extends Obj {
  model: string;
  messages: Obj[];
  stream?: boolean | null;
  max_tokens?: number | null;
  max_completion_tokens?: number | null;
  n?: number | null;
  stream_options?: unknown;
}

function message(m: unknown, i: number, issues: Issues): void {
  const loc = ['body', 'messages', String(i)];
  if (!isObj(m)) return issues.add(loc, 'dict_type', 'Input should be a valid dictionary', m);
  const role = literal(m, 'role', ROLES, loc, issues, true);
  const c = m.content;
  const toolCalls = Array.isArray(m.tool_calls) && m.tool_calls.length > 0;
  if (c === undefined || c === null) {
    // An assistant turn that only calls tools may carry no content (OpenAI's own rule).
    if (role === 'assistant' && toolCalls) return;
    if (c === undefined) issues.add([...loc, 'content'], 'missing', 'Field required', m);
    else issues.add([...loc, 'content'], 'string_type', 'Input should be a valid string', c);
    return;
  }
  if (typeof c === 'string') return;
  if (!Array.isArray(c)) return issues.add([...loc, 'content'], 'string_type', 'Input should be a valid string', c);
  for (let j = 0; j < c.length && !issues.full; j++) {
    const part: unknown = c[j];
    if (!isObj(part)) issues.add([...loc, 'content', String(j)], 'dict_type', 'Input should be a valid dictionary', part);
    else str(part, 'type', [...loc, 'content', String(j)], issues, { required: true });
  }
}

/** The validated body, or a ValidationError listing its first problems (at most MAX_ISSUES). `maxN` bounds `n` (limits.max_n, SPEC §12). */
export function validateChatBody(value: unknown, maxN: number): ChatBody {
  const issues = new Issues();
  if (!rootObject(value, issues)) {
    issues.done();
  }
  const body = value as Obj;
  str(body, 'model', ['body'], issues, { required: true, minLength: 1 });
  const messages = list(body, 'messages', ['body'], issues, { required: true, minLength: 1 });
  // Stops at the issue cap (Issues.full): a 4 MiB body of a million bad messages is refused as fast as one.
  if (messages) for (let i = 0; i < messages.length && !issues.full; i++) message(messages[i], i, issues);
  // OpenAI accepts null for these optional fields (= not set); so do we.
  const opt = (k: string) => (body[k] === null ? {} : body);
  bool(opt('stream'), 'stream', ['body'], issues);
  int(opt('max_tokens'), 'max_tokens', ['body'], issues, { gt: 0 });
  int(opt('max_completion_tokens'), 'max_completion_tokens', ['body'], issues, { gt: 0 });
  int(opt('n'), 'n', ['body'], issues, { gt: 0, le: maxN });
  if (body.stream_options !== undefined && body.stream_options !== null && !isObj(body.stream_options)) {
    issues.add(['body', 'stream_options'], 'dict_type', 'Input should be a valid dictionary', body.stream_options);
  }
  issues.done();
  return body as ChatBody;
}
