"""Shared test code (imported as ``tests.helpers.*``). ``ROOT``: the checkout's root, wherever the test file sits."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
