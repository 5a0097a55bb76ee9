"""The base of the app's action mixins: LlmChatApp for the type checker (so a mixin's uses of the app's store,
sessions and screen are checked), a plain object at run time (so this module never imports the app)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..app import LlmChatApp

    AppMixin = LlmChatApp
else:
    AppMixin = object
