// wrk, the load generator of `make bench` and `make profile`: installed from Debian's packages
// when missing (a fresh machine does not have it), and its version for the results.
import { execFileSync } from 'node:child_process';

const log = (...a) => process.stderr.write(`[bench] ${a.join(' ')}\n`);

export function ensureWrk() {
  const has = () => {
    try {
      execFileSync('wrk', ['-v'], { stdio: 'ignore' });
      return true;
    } catch (e) {
      return e.code !== 'ENOENT'; // `wrk -v` exits 1 after printing its version
    }
  };
  if (has()) return;
  log('installing wrk (apt-get install -y wrk)');
  const sudo = process.getuid?.() === 0 ? [] : ['sudo'];
  const apt = (args) => execFileSync(sudo[0] ?? 'apt-get', [...(sudo.length ? ['apt-get'] : []), ...args], { stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
  try {
    apt(['install', '-y', '-q', 'wrk']);
  } catch {
    apt(['update', '-q']);
    apt(['install', '-y', '-q', 'wrk']);
  }
  if (!has()) throw new Error('wrk is still not available after apt-get install');
}

export const wrkVersion = () => {
  try {
    execFileSync('wrk', ['-v'], { encoding: 'utf8' });
  } catch (e) {
    return String(e.stdout ?? '').split('\n')[0].trim();
  }
  return 'wrk';
};
