// bench/runtime-calls.ts names the JavaScript behind V8 runtime calls: callgrind's lines (a runtime
// function with its callers' context, JIT code as bare addresses) through V8's perf map. The input is
// the shape `callgrind_annotate --inclusive=yes` prints for a dump made with --separate-callers.
import t from 'tap';
import { reportRuntimeCalls } from '../../bench/runtime-calls.ts';

const PERF_MAP = [
  '1000 100 JS:*nextTick node:internal/process/task_queues:113:18',
  '2000 80 JS:*addChunk node:internal/streams/readable:565:18',
  '3000 40 JS:*prepare file:///src/routes/metered.ts:302:25',
].join('\n');
const line = (ir: string, fn: string) => `${ir} ( 1.00%)  ???:${fn} [/usr/bin/node]`;
const ANNOTATED = [
  '--------------------------------------------------------------------------------',
  line(
    '8,000',
    "v8::internal::Runtime_DefineKeyedOwnPropertyInLiteral(int, unsigned long*, v8::internal::Isolate*)'Builtins_CEntry_Return1_ArgvOnStack_NoBuiltinExit'0x0000000000001010'0x0000000000002004",
  ),
  line(
    '4,000',
    "v8::internal::Runtime_DefineKeyedOwnPropertyInLiteral(int, unsigned long*, v8::internal::Isolate*)'Builtins_CEntry_Return1_ArgvOnStack_NoBuiltinExit'0x0000000000001010'0x0000000000009999",
  ),
  line(
    '2,000',
    "v8::internal::Runtime_InternalizeString(int, unsigned long*, v8::internal::Isolate*)'Builtins_CEntry_Return1_ArgvOnStack_NoBuiltinExit'Builtins_FindOrderedHashMapEntry'0x0000000000003020",
  ),
  // Not entered from JavaScript (no CEntry in its context): left out.
  line('9,000', "v8::internal::Runtime_StackGuard(int, unsigned long*, v8::internal::Isolate*)'v8::internal::Execution::Call"),
  // A runtime function's callee, not a runtime call: left out.
  line('7,000', "v8::internal::JSObject::MigrateToMap(v8::internal::Isolate*)'v8::internal::Runtime_DefineKeyedOwnPropertyInLiteral(int)"),
].join('\n');

t.test('runtime calls are summed per request by their JavaScript callers, named through the perf map', async (t) => {
  const report = reportRuntimeCalls(ANNOTATED, PERF_MAP, 4);
  const lines = report.trimEnd().split('\n');
  t.match(lines[0], /3,500 in all:$/, 'the total: 14,000 instructions over 4 requests');
  t.match(
    lines[1],
    /^\s+2,000  Runtime_DefineKeyedOwnPropertyInLiteral <- JS:\*nextTick node:internal\/process\/task_queues:113:18 <- JS:\*addChunk /,
  );
  t.match(
    lines[2],
    /^\s+1,000  Runtime_DefineKeyedOwnPropertyInLiteral <- JS:\*nextTick node:internal\/process\/task_queues:113:18$/,
    'an address outside the map is not a JS frame',
  );
  t.match(
    lines[3],
    /^\s+500  Runtime_InternalizeString <- JS:\*prepare file:\/\/\/src\/routes\/metered.ts:302:25$/,
    'a builtin between the call and the JS is skipped',
  );
  t.equal(lines.length, 4, 'nothing else');
  t.equal(reportRuntimeCalls(ANNOTATED, PERF_MAP, 4, 1).trimEnd().split('\n').length, 2, 'top limits the lines');
});
