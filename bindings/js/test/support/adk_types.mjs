// SPDX-License-Identifier: Apache-2.0
// Reads the declared TypeScript types of the installed @google/adk (and the
// @google/genai types it embeds) with the TypeScript compiler (one program per process):
// - usageDiagnostics(): test/types/usage.ts checked against src/index.d.ts;
// - reachableEventMembers(): every member name reachable from ADK's `Event`, with the
//   first path it was seen at;
// - sampleEvent(): an Event value with every reachable member set (each union resolved
//   to its first non-empty member, recursion cut where a type repeats on its own path).
// Members whose values are free-form data (src/names.js OPAQUE) are not descended into,
// as the mapping does not descend into them; the sample gives them mixed-case keys.
import { createRequire } from 'node:module';
import path from 'node:path';
import ts from 'typescript';
import { MAP_OF_RECORDS, OPAQUE } from '../../src/names.js';

const require = createRequire(import.meta.url);

let cached;
function load() {
  if (cached) return cached;
  const adkRoot = path.dirname(require.resolve('@google/adk/package.json'));
  const entry = path.join(adkRoot, 'dist/types/events/event.d.ts');
  const program = ts.createProgram([entry, USAGE], {
    strict: true,
    types: [], // only what the roots import

    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    skipLibCheck: true,
    noEmit: true,
  });
  const checker = program.getTypeChecker();
  const file = program.getSourceFile(entry);
  const decl = file.statements.find((s) => ts.isInterfaceDeclaration(s) && s.name.text === 'Event');
  if (!decl) throw new Error(`no interface Event in ${entry}`);
  cached = { program, checker, eventType: checker.getTypeAtLocation(decl) };
  return cached;
}

/** test/types/usage.ts, compiled in the same program as the Event walk. */
export const USAGE = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../types/usage.ts');

/** The compiler's complaints about test/types/usage.ts, and the files it read. */
export function usageDiagnostics() {
  const { program } = load();
  const diagnostics = ts.getPreEmitDiagnostics(program, program.getSourceFile(USAGE)).map((d) =>
    `${d.file ? path.basename(d.file.fileName) : ''}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`);
  return { diagnostics, files: program.getSourceFiles().map((f) => path.resolve(f.fileName)) };
}

function fromOpenApi(type) {
  const decl = type.getSymbol()?.declarations?.[0];
  return Boolean(decl && /openapi-types/.test(decl.getSourceFile().fileName));
}

function dataMembers(checker, type) {
  const out = [];
  for (const prop of type.getProperties()) {
    const name = prop.getName();
    if (name.startsWith('__@')) continue; // a symbol-keyed brand
    const decl = prop.valueDeclaration ?? prop.declarations?.[0];
    if (decl && (ts.isMethodDeclaration(decl) || ts.isMethodSignature(decl))) continue;
    const propType = checker.getTypeOfSymbol(prop);
    if (propType.getCallSignatures().length > 0) continue;
    out.push({ name, type: checker.getNonNullableType(propType) });
  }
  return out;
}

export function reachableEventMembers() {
  const { checker, eventType } = load();
  const found = new Map();
  const seen = new Set();
  const visit = (type, where) => {
    if (seen.has(type)) return;
    seen.add(type);
    if (type.isUnion() || type.isIntersection()) {
      for (const t of type.types) visit(t, where);
      return;
    }
    if (checker.isArrayType(type) || checker.isTupleType(type)) {
      for (const t of checker.getTypeArguments(type)) visit(t, where);
      return;
    }
    if (!(type.flags & ts.TypeFlags.Object) || fromOpenApi(type)) return;
    const members = dataMembers(checker, type);
    if (members.length === 0) {
      for (const info of checker.getIndexInfosOfType(type)) visit(info.type, `${where}[*]`);
      return;
    }
    for (const { name, type: t } of members) {
      if (!found.has(name)) found.set(name, `${where}.${name}`);
      if (OPAQUE.has(name)) continue;
      if (MAP_OF_RECORDS.has(name)) {
        for (const info of checker.getIndexInfosOfType(t)) visit(info.type, `${where}.${name}[*]`);
        continue;
      }
      visit(t, `${where}.${name}`);
    }
  };
  visit(eventType, 'Event');
  return found;
}

// Free-form data with keys in every style, nested. Only OPAQUE members' values may hold
// a key that is the wire name of a known member (`function_call`): elsewhere the
// mapping refuses it.
function opaqueSample(name, { wireNames = false } = {}) {
  const out = {
    camelKey: 1.5,
    snake_key: [true, null, 'x'],
    [`${name}Own`]: { deep: [{ deeperKey: 'v', mimeType: 'kept' }] },
  };
  if (wireNames) out.function_call = { mimeType: 'kept as given', 'temp:not-state': 0 };
  return out;
}

export function sampleEvent() {
  const { checker, eventType } = load();
  const sample = (type, name, onPath) => {
    if (type.isUnion()) {
      const members = type.types.filter((t) => !(t.flags & (ts.TypeFlags.Undefined | ts.TypeFlags.Null)));
      const literal = members.find((t) => t.isStringLiteral() || t.isNumberLiteral());
      if (literal) return literal.value;
      if (members.every((t) => t.flags & ts.TypeFlags.BooleanLiteral)) return true;
      const object = members.find((t) => t.flags & ts.TypeFlags.Object);
      return sample(object ?? members[0], name, onPath);
    }
    if (type.isStringLiteral() || type.isNumberLiteral()) return type.value;
    if (type.flags & ts.TypeFlags.StringLike) return `${name}-value`;
    if (type.flags & ts.TypeFlags.NumberLike) return 42.25;
    if (type.flags & ts.TypeFlags.BooleanLike) return true;
    if (type.flags & (ts.TypeFlags.Any | ts.TypeFlags.Unknown)) return opaqueSample(name);
    if (checker.isArrayType(type)) {
      return [sample(checker.getTypeArguments(type)[0], name, onPath)];
    }
    if (!(type.flags & ts.TypeFlags.Object)) return `${name}-value`;
    if (onPath.has(type)) return undefined;
    const inner = new Set(onPath).add(type);
    const members = dataMembers(checker, type);
    if (members.length === 0) {
      const infos = checker.getIndexInfosOfType(type);
      if (infos.length === 0) return {};
      const v = sample(infos[0].type, name, inner);
      return { firstKey: v, second_key: v };
    }
    const out = {};
    for (const { name: member, type: t } of members) {
      if (OPAQUE.has(member)) {
        out[member] = opaqueSample(member, { wireNames: true });
        continue;
      }
      if (MAP_OF_RECORDS.has(member)) {
        const info = checker.getIndexInfosOfType(t)[0];
        out[member] = { 'adk-call_1': sample(info.type, member, inner) };
        continue;
      }
      const v = sample(t, member, inner);
      if (v !== undefined) out[member] = v;
    }
    return out;
  };
  return sample(eventType, 'event', new Set());
}
