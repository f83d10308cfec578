// cluster-key-slot (ioredis' own dependency, the function it routes commands by) ships no types.
declare module 'cluster-key-slot' {
  /** The Redis Cluster slot (0–16383) of a key, by its hash tag when it has one. */
  export default function calculateSlot(key: string): number;
}
