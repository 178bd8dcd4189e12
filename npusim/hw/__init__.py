"""Hardware profiles of the NPU (TOML -> frozen dataclasses)."""

from .profile import HardwareProfile, Pool, load_profile, profile_from_dict, default_profile_path

__all__ = ["HardwareProfile", "Pool", "load_profile", "profile_from_dict", "default_profile_path"]
