"""The parts of the ``Memory`` facade beyond the write and read paths, one concern each:
governance (marks, pins, notes, policy, expiry), operations (jobs, status, metrics, API
keys) and story memory. ``convmem.memory.Memory`` composes them."""

from convmem.facade.base import FacadeBase
from convmem.facade.governance import GovernanceMethods
from convmem.facade.operations import OperationsMethods
from convmem.facade.story import StoryMethods

__all__ = ["FacadeBase", "GovernanceMethods", "OperationsMethods", "StoryMethods"]
