// SPDX-License-Identifier: Apache-2.0
// `agentstate serve --listen ...` as a child process for the tests that connect to an
// address: its bound addresses (from the "listening on ADDRESS" log lines), and stop().
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/**
 * Starts `BIN serve ARGS` and resolves once it has logged `listeners` bound addresses,
 * in the order of its --listen options. Rejects with the server's log when it exits first.
 */
export function startServer(bin, args, { listeners = 1 } = {}) {
  const child = spawn(bin, ['serve', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  return new Promise((resolve, reject) => {
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (s) => {
      log += s;
      const addresses = [...log.matchAll(/listening on ([^\s"]+)/g)].map((m) => m[1]);
      if (addresses.length === listeners) {
        resolve({
          addresses,
          address: addresses[0],
          log: () => log,
          pid: child.pid,
          /** SIGTERM; resolves with the exit code (0 after a clean shutdown). */
          async stop() {
            if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
            return (await exited).code;
          },
          /** SIGKILL (a crash); resolves once the process is gone. */
          async kill() {
            if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
            await exited;
          },
        });
      }
    });
    exited.then(({ code, signal }) => reject(new Error(`serve exited (${code ?? signal}) before listening: ${log}`)));
  });
}

/** Writes an --auth-file: { token: '*' | ['app', ...] }. */
export function writeTokens(file, tokens) {
  const lines = Object.entries(tokens).map(([t, apps]) => `${t} ${apps === '*' ? '*' : apps.join(',')}`);
  fs.writeFileSync(file, `# test tokens\n${lines.join('\n')}\n`, { mode: 0o600 });
  return file;
}

/**
 * A self-signed certificate for 127.0.0.1 made with the openssl CLI (tools/setup.sh
 * installs it): { cert, key } paths in `dir`; the certificate is its own CA.
 */
export function selfSignedCert(dir) {
  const cert = path.join(dir, 'server.pem');
  const key = path.join(dir, 'server.key');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256',
    '-nodes', '-days', '2', '-subj', '/CN=agentstate-test', '-addext', 'subjectAltName=IP:127.0.0.1',
    '-keyout', key, '-out', cert], { stdio: ['ignore', 'ignore', 'pipe'] });
  return { cert, key };
}
