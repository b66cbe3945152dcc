// Walks the declared TypeScript type of @google/adk's Event (as installed) and
// returns every member name reachable from it, with the path it was first seen at.
// Members whose values are free-form data (src/names.js: OPAQUE, MAP_OF_RECORDS)
// are not descended into, as the mapping does not descend into them.
import { createRequire } from 'node:module';
import path from 'node:path';
import ts from 'typescript';
import { OPAQUE, MAP_OF_RECORDS } from '../../src/names.js';

const require = createRequire(import.meta.url);

export function reachableEventMembers() {
  const adkRoot = path.dirname(require.resolve('@google/adk/package.json'));
  const entry = path.join(adkRoot, 'dist/types/events/event.d.ts');
  const program = ts.createProgram([entry], {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    skipLibCheck: true,
    noEmit: true,
  });
  const checker = program.getTypeChecker();
  const file = program.getSourceFile(entry);
  const eventDecl = file.statements.find(
    (s) => ts.isInterfaceDeclaration(s) && s.name.text === 'Event');
  const eventType = checker.getTypeAtLocation(eventDecl);

  const found = new Map(); // name -> first path
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
    if (!(type.flags & ts.TypeFlags.Object)) return;
    // Types from openapi-types (auth schemes) keep their own names on the wire.
    const decl = type.getSymbol()?.declarations?.[0];
    if (decl && /openapi-types/.test(decl.getSourceFile().fileName)) return;
    if (checker.getIndexInfosOfType(type).length > 0 && type.getProperties().length === 0) {
      for (const info of checker.getIndexInfosOfType(type)) visit(info.type, where + '[*]');
      return;
    }
    for (const prop of type.getProperties()) {
      const name = prop.getName();
      if (name.startsWith('__@')) continue; // symbol-keyed brand
      const propDecl = prop.valueDeclaration ?? prop.declarations?.[0];
      if (propDecl && (ts.isMethodDeclaration(propDecl) || ts.isMethodSignature(propDecl))) continue;
      const propType = checker.getTypeOfSymbol(prop);
      if (propType.getCallSignatures().length > 0) continue;
      if (!found.has(name)) found.set(name, `${where}.${name}`);
      if (OPAQUE.has(name)) continue;
      if (MAP_OF_RECORDS.has(name)) {
        const t = checker.getNonNullableType(propType);
        for (const info of checker.getIndexInfosOfType(t)) visit(info.type, `${where}.${name}[*]`);
        continue;
      }
      visit(checker.getNonNullableType(propType), `${where}.${name}`);
    }
  };
  visit(eventType, 'Event');
  return found;
}
