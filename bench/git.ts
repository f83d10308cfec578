/**
 * Names the code a run measures. A ref is resolved once, before anything runs (HEAD may move while a
 * run is under way), and labelled with the last commit that touched src/, which is what the gateway
 * is built from: results commits in between do not change what is measured.
 */
import { execFileSync } from 'node:child_process';

const git = (...args: string[]) => execFileSync('git', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();

/** For `--ref`: the short SHA to export and its label; without a ref: the working tree's label. */
export function describeRef(ref: string | undefined): { sha: string | undefined; label: string } {
  try {
    if (ref) {
      const sha = git('rev-parse', '--short', `${ref}^{commit}`);
      const src = git('log', '-1', '--format=%h', sha, '--', 'src');
      return { sha, label: src && src !== sha ? `${sha} (src/ as of ${src})` : sha };
    }
    const head = git('rev-parse', '--short', 'HEAD');
    const src = git('log', '-1', '--format=%h', 'HEAD', '--', 'src');
    // Only uncommitted changes under src/ change what is measured.
    const dirty = git('status', '--porcelain', '--', 'src') !== '';
    return {
      sha: undefined,
      label: `working tree at ${head}${src && src !== head ? ` (src/ as of ${src})` : ''}${dirty ? ' + uncommitted src/ changes' : ''}`,
    };
  } catch {
    return { sha: ref, label: ref ?? 'unknown' };
  }
}

/** The short SHA of HEAD, for a results header; 'unknown' outside a git checkout. */
export function shortHead(): string {
  try {
    return git('rev-parse', '--short', 'HEAD');
  } catch {
    return 'unknown';
  }
}
