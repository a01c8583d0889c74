"""Typed, frozen configuration: cdc.yaml and the table registrations under tables/."""
from cdc.config.loader import load_settings, load_tables
from cdc.config.models import CatalogSettings, Settings, SourceSettings, StackSettings, TableRegistration

__all__ = ["CatalogSettings", "Settings", "SourceSettings", "StackSettings", "TableRegistration",
           "load_settings", "load_tables"]
