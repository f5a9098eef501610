#!/usr/bin/env python3
"""Prints action.yml as a workflow, for actionlint (which checks workflows, not action metadata).

    action-as-workflow.py ACTION.yml >WORKFLOW.yml

The workflow is reusable (`workflow_call`) with the action's inputs, so `inputs.*` expressions
mean what they mean in the action. Job `steps` runs the action's own steps: actionlint checks
their expressions, the inputs of the actions they use, and their `run:` scripts (with shellcheck
when it is on PATH). Job `uses` calls the action as a user would (`uses: ./`) with every input
set: actionlint checks those against the action's metadata.
"""

import sys

import yaml


def main(argv):
    if len(argv) != 2:
        print("usage: action-as-workflow.py ACTION.yml", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as file:
        action = yaml.safe_load(file)
    runs = action.get("runs", {})
    if runs.get("using") != "composite":
        print(f"{argv[1]}: not a composite action", file=sys.stderr)
        return 1
    inputs = action.get("inputs") or {}
    workflow = {
        "name": f"{action.get('name', 'action')} (as a workflow)",
        "on": {
            "workflow_call": {
                "inputs": {
                    name: {
                        "description": spec.get("description", ""),
                        "type": "string",
                        "default": str(spec.get("default", "")),
                    }
                    for name, spec in inputs.items()
                }
            }
        },
        "jobs": {
            "steps": {"runs-on": "ubuntu-latest", "steps": runs.get("steps", [])},
            "uses": {
                "runs-on": "ubuntu-latest",
                "steps": [
                    {"uses": "actions/checkout@v5"},
                    {
                        "uses": "./",
                        "with": {name: f"${{{{ inputs.{name} }}}}" for name in inputs},
                    },
                ],
            },
        },
    }
    yaml.safe_dump(workflow, sys.stdout, sort_keys=False, width=100)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
