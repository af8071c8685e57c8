"""Build hook: the wheel carries the workflow as package data (synthaudit/_workflow/).

Why a hook and not [tool.hatch.build.targets.wheel.force-include]: that table also applies to
editable installs, which would then copy the workflow into site-packages beside the .pth that
points at src/; an editable install must use the checkout's own files (src/synthaudit/_workflow
holds links to them). Only the standard wheel gets the copies.
"""

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

# top-level paths of the checkout -> their place in the wheel
WORKFLOW_FILES = ("Snakefile", "workflow", "envs", "params.yaml")


class WorkflowDataHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version, build_data):
        if self.target_name != "wheel" or version != "standard":
            return
        for name in WORKFLOW_FILES:
            build_data["force_include"][f"{self.root}/{name}"] = f"synthaudit/_workflow/{name}"
