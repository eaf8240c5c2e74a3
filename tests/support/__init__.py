"""Test doubles that live only in the test tree."""
