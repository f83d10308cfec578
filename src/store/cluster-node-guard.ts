/**
 * A Redis Cluster node that stops answering while its TCP connection stays open (the process frozen, a
 * partition that drops packets without a reset): ioredis keeps writing every command of that node's slots
 * to the socket. Each one times out after `commandTimeout`, but stays in the node's reply queue, and the
 * node runs them all once it answers again. Under load that queue grows with the outage (every request of
 * an account on the node, and every retry of every settle that failed there, each retry of each settle
 * one more command, test/cluster/partition.test.ts), and each refused request's hold was sent, so it may
 * run: its settle at 0 retries for up to an hour.
 *
 * So, per node, as the script pipe does for a single node (script-pipe.ts, "the oldest command in flight
 * decides"): while the node's oldest unanswered command has waited `commandTimeoutMs` or more, a command
 * for it is refused at once with `NodeUnresponsiveError` (`sent: false`: it certainly did not run, so the
 * credit layer takes no settle for a hold refused so), instead of being written behind the others. The
 * node's first reply after it resumes empties that queue from the front, and commands flow again: no
 * probe, no timer. While a node is overdue the slot table is also refreshed (at most every `REFRESH_MS`):
 * a replica promoted in its place is then used without waiting for a MOVED the frozen node cannot send.
 */
import type { Cluster, Redis } from 'ioredis';

/** How often the slot table is refreshed while a node is overdue (a failover takes seconds: NOTES §14). */
const REFRESH_MS = 1_000;

/** A command refused because its node has not answered for a command timeout: never sent, so it did not run. */
export class NodeUnresponsiveError extends Error {
  override name = 'NodeUnresponsiveError';
  /** Read by the credit layer (credit.ts neverSent): the command was not written. */
  readonly sent = false;
}

interface NodeCommand {
  promise: Promise<unknown>;
  reject(err: Error): void;
}
interface PipelineStream {
  isPipeline?: boolean;
}
interface NodeInternals {
  sendCommand(command: NodeCommand, stream?: PipelineStream): unknown;
  commandQueue: { peekFront(): { command: NodeCommand } | undefined };
  options: { host?: string; port?: number };
}
interface ClusterInternals {
  refreshSlotsCache(callback?: (err?: Error) => void): void;
}

/** Installs the guard on every node the Cluster connects to, now and later. */
export function guardUnresponsiveNodes(
  redis: Cluster,
  commandTimeoutMs: number,
  onError: (err: Error) => void,
  onOverdue: () => void = () => {},
): void {
  /** When each command was written to its node (the last time, for one written again). */
  const writtenAt = new WeakMap<NodeCommand, number>();
  let lastRefresh = 0;

  /** Whether the node's oldest unanswered command (written through the guard) has waited a command timeout. */
  function overdue(node: NodeInternals, now: number): boolean {
    const first = node.commandQueue.peekFront();
    const at = first && writtenAt.get(first.command);
    return at !== undefined && now - at >= commandTimeoutMs;
  }

  function refresh(now: number): void {
    if (now - lastRefresh < REFRESH_MS) return;
    lastRefresh = now;
    (redis as unknown as ClusterInternals).refreshSlotsCache((err) => {
      if (err) onError(err);
    });
  }

  function wrap(node: Redis): void {
    const n = node as unknown as NodeInternals;
    const send = n.sendCommand.bind(node);
    /** A pipeline's commands go to one node in one write: all refused or all sent, never part of them. */
    const pipelines = new WeakMap<PipelineStream, boolean>();
    n.sendCommand = (command, stream) => {
      const now = performance.now();
      const pipeline = stream?.isPipeline ? stream : undefined;
      let refuse = pipeline && pipelines.get(pipeline);
      if (refuse === undefined) {
        refuse = overdue(n, now);
        if (pipeline) pipelines.set(pipeline, refuse);
      }
      if (refuse) {
        refresh(now);
        // What the node acknowledged before it stopped answering may not reach a replica promoted for it.
        onOverdue();
        command.reject(
          new NodeUnresponsiveError(
            `redis node ${n.options.host}:${n.options.port} has not answered for ${commandTimeoutMs} ms or more; command not sent`,
          ),
        );
        return command.promise;
      }
      writtenAt.set(command, now);
      return send(command, stream);
    };
  }

  for (const node of redis.nodes('all')) wrap(node);
  redis.on('+node', wrap);
}
