// SPDX-License-Identifier: Apache-2.0
// Module resolution hooks of in-process mode (registered by inprocess_register.mjs): a
// test file's import of the package's src/index.js resolves to inprocess_service.mjs
// instead, which exports the same names with an AgentStateSessionService that runs the
// engine in the test's process. Imports from src/ itself and from inprocess_service.mjs
// are left alone.
const INDEX = new URL('../../src/index.js', import.meta.url).href;
const WRAPPER = new URL('./inprocess_service.mjs', import.meta.url).href;
const SRC = new URL('../../src/', import.meta.url).href;

export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  const parent = context.parentURL ?? '';
  if (resolved.url === INDEX && parent !== WRAPPER && !parent.startsWith(SRC)) {
    return { ...resolved, url: WRAPPER, shortCircuit: true };
  }
  return resolved;
}
