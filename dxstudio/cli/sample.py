"""`dxstudio sample [DIR]`: copy the bundled sample project (40 labelled receipts) to DIR
(default ./dxstudio-sample) and print where it is, for the headless commands:

    dxstudio sample my-sample && dxstudio tune my-sample

and `dxstudio schema PROJECT --field NAME[:DESCRIPTION]...`: set (or add to) a project's fields.
"""
from __future__ import annotations

from dxstudio.bundled import SampleCopyError, copy_sample
from dxstudio.cli.common import emit_json, fail, warn
from dxstudio.fsutil import JSONInputError, loads_json
from dxstudio.project import Field, Project, ProjectError, parse_schema

DEFAULT_DIR = "dxstudio-sample"


def configure(name, p):
    if name == "sample":
        p.add_argument("dir", nargs="?", default=DEFAULT_DIR,
                       help=f"a new or empty folder to copy the sample project into (default ./{DEFAULT_DIR})")
    else:
        p.add_argument("project", help="project folder")
        p.add_argument("--field", action="append", default=[], metavar="NAME[:DESCRIPTION]", dest="fields",
                       help="a field to extract, with what it means for the labelling model (repeat it)")
        p.add_argument("--from", dest="schema_file", metavar="FILE",
                       help='the fields from a JSON file: a list of names or {"name", "description", "weight"}, '
                            'or an object with a "schema" list (a dxproject.json)')
        p.add_argument("--replace", action="store_true",
                       help="the fields given become the whole schema (default: added to it; a field "
                            "already there takes the new description)")


def parse_field(text: str):
    name, _, description = text.partition(":")
    return Field(name.strip(), description.strip())


def read_schema_file(path) -> list:
    """The fields of a schema file (`schema --from`, `import --schema`), checked."""
    try:
        with open(path, "rb") as fh:
            data = loads_json(fh.read())
    except OSError as e:
        fail(f"{path}: cannot read ({e.strerror or e})")
    except JSONInputError as e:
        fail(f"{path}: not valid JSON ({e})")
    if isinstance(data, dict) and "schema" in data:
        data = data["schema"]
    try:
        return parse_schema(data, str(path))
    except ProjectError as e:
        fail(e)


def merge_fields(project, fields, replace: bool) -> list[str]:
    """Set the project's schema: fields replace it, or are added (a name already there takes
    the new description and weight). Returns the schema's names; not saved."""
    if replace:
        schema = list(fields)
    else:
        given = {f.name: f for f in fields}
        schema = [given.pop(f.name, f) for f in project.schema] + list(given.values())
    project.set_schema(schema)
    return project.field_names


def run(name, args) -> int:
    if name == "sample":
        try:
            path, copied = copy_sample(args.dir)
        except SampleCopyError as e:
            fail(e)
        warn(f"{'copied the sample project to' if copied else 'the sample project is already at'} {path}; "
             f"next: dxstudio tune {path}")
        emit_json({"sample": str(path), "copied": copied})
        return 0

    try:
        project = Project.open(args.project)
        fields = [parse_field(t) for t in args.fields]
        if args.schema_file:
            fields = read_schema_file(args.schema_file) + fields
        if not fields and not args.replace:
            emit_json({"project": str(project.root), "schema": [f.to_dict() for f in project.schema]})
            return 0
        merge_fields(project, fields, args.replace)
        project.save()
    except ProjectError as e:
        fail(e)
    except OSError as e:
        fail(f"{args.project}: cannot write the project ({e.strerror or e})")
    emit_json({"project": str(project.root), "schema": [f.to_dict() for f in project.schema]})
    return 0
