// src/index.d.ts compiles against @google/adk's own types, as a TypeScript user sees it
// (the package imported by its name, strict mode, NodeNext resolution).
import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import ts from 'typescript';
import { PACKAGE_DIR } from './support/env.mjs';

test('the type declarations compile and reject misuse', () => {
  const file = path.join(PACKAGE_DIR, 'test/types/usage.ts');
  const program = ts.createProgram([file], {
    strict: true,
    noEmit: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    skipLibCheck: true,
  });
  const diagnostics = ts.getPreEmitDiagnostics(program).map((d) =>
    `${d.file ? path.relative(PACKAGE_DIR, d.file.fileName) : ''}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`);
  assert.deepEqual(diagnostics, []);
  const own = program.getSourceFiles().map((f) => path.resolve(f.fileName))
    .filter((f) => f === path.join(PACKAGE_DIR, 'src/index.d.ts'));
  assert.equal(own.length, 1, 'the package resolved to its own declarations');
});
