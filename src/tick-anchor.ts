/**
 * Keeps one `process.nextTick` tick object alive for the life of the process, so that every later
 * nextTick stays on V8's fast path (bench/results/stream-instructions.md, "2026-12-02: the nextTick flip").
 *
 * Node 26's nextTick builds its tick object with a literal whose first keys are computed symbols
 * (`{[async_id_symbol]: …, [trigger_async_id_symbol]: …, [async_context_frame]: …, callback, args}`).
 * Each such key is a `DefineKeyedOwnPropertyInLiteral` whose feedback holds one map, weakly, and turns
 * MEGAMORPHIC for good on any other map; a map that was collected counts as another. So the first full
 * GC that runs while no tick is queued (at start-up on the Redis store, before any request) frees the
 * tick object's maps, the next nextTick builds new ones, and from then on each nextTick (`onwrite`,
 * `resOnFinish`, `Readable.read`, …) costs ~1,000–1,400 instructions of V8 runtime calls: 35–47k per
 * request. One tick object kept alive keeps its map and, through the map's back pointers, the maps
 * before it. `executionAsyncResource()` inside a tick callback is that tick's object.
 *
 * Imported first by src/main.ts: the tick is queued before any other code runs, and held from the
 * moment it runs, so its maps never go unreferenced. Made outside any AsyncLocalStorage context, so
 * it holds no context frame.
 */
import { executionAsyncResource } from 'node:async_hooks';

let anchor: object | undefined;
process.nextTick(() => {
  anchor = executionAsyncResource();
});

/** The tick object held (undefined until the first tick queue has run). */
export function tickAnchor(): object | undefined {
  return anchor;
}
