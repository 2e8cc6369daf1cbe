"""An import-linter contract type that allows instead of forbids: every import made by the source modules must be
of a module the contract names (its own package, the layers below, the libraries it may use); anything else,
a new library included, breaks the contract until someone adds it on purpose."""

from __future__ import annotations

import sys

import grimp
from importlinter import Contract, ContractCheck, fields, output
from importlinter.domain import helpers


class AllowlistContract(Contract):
    """Options: ``source_modules`` (packages checked), ``allowed_modules`` (packages they may import, each with
    its subpackages; ``=name``: that module alone; ``@stdlib``: the standard library) and ``ignore_imports``
    (known exceptions, ``importer -> imported``; one that matches no import breaks the contract too)."""

    type_name = "allowlist"

    source_modules = fields.ListField(subfield=fields.ModuleExpressionField())
    allowed_modules = fields.ListField(subfield=fields.StringField())
    ignore_imports = fields.SetField(subfield=fields.ImportExpressionField(), required=False)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        sources = sorted(
            module.name
            for module in helpers.module_expressions_to_modules(graph, self.source_modules)  # type: ignore[arg-type]
        )
        ignored: set[tuple[str, str]] = set()
        unmatched: list[str] = []
        expressions: set[object] = self.ignore_imports or set()  # type: ignore[assignment]
        for expression in sorted(map(str, expressions)):
            found = graph.find_matching_direct_imports(import_expression=expression)
            ignored.update((match["importer"], match["imported"]) for match in found)
            if not found:
                unmatched.append(expression)
        names: list[str] = [*self.allowed_modules, *sources]  # type: ignore[misc]
        exact = {name[1:] for name in names if name.startswith("=")}
        packages = tuple(name for name in names if name[0] not in "=@")
        stdlib = "@stdlib" in names
        broken = [f"ignore_imports matches no import: {expression}" for expression in unmatched]
        for source in sources:
            for importer in sorted({source} | graph.find_descendants(source)):
                for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                    if (importer, imported) in ignored or imported in exact:
                        continue
                    if stdlib and imported.split(".")[0] in sys.stdlib_module_names:
                        continue
                    if not any(imported == p or imported.startswith(p + ".") for p in packages):
                        broken.append(f"{importer} imports {imported}, which is not on the allowlist")
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for line in check.metadata["broken"]:
            output.print_error(line)
            output.new_line()
