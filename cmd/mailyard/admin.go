package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/mailyard/mailyard/internal/config"
	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/store"
)

func cmdMigrate(ctx context.Context, args []string) error {
	cfg, err := config.Load(config.NeedMigrate)
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer st.Close()
	action := "up"
	if len(args) > 0 {
		action = args[0]
	}
	switch action {
	case "up":
		applied, err := st.Migrate(ctx)
		if err != nil {
			return err
		}
		if len(applied) == 0 {
			fmt.Println("database is up to date")
		}
		for _, name := range applied {
			fmt.Println("applied", name)
		}
		return nil
	case "status":
		pending, err := st.Pending(ctx)
		if err != nil {
			return err
		}
		if len(pending) == 0 {
			fmt.Println("database is up to date")
		}
		for _, name := range pending {
			fmt.Println("pending", name)
		}
		return nil
	default:
		return fmt.Errorf("unknown migrate action %q (use up or status)", action)
	}
}

func cmdOrg(ctx context.Context, args []string) error {
	if len(args) != 2 || args[0] != "create" || args[1] == "" {
		return errors.New("usage: mailyard org create NAME")
	}
	cfg, err := config.Load(config.Need{Database: true})
	if err != nil {
		return err
	}
	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	org, secret, err := createOrganization(ctx, st, args[1])
	if err != nil {
		return err
	}
	fmt.Printf("organization %d %q created\nadmin key (shown once, store it now): %s\n", org.ID, org.Name, secret)
	return nil
}

// createOrganization makes an organization and its bootstrap admin key, scoped to
// the organization rather than to a domain, and returns the key's secret.
func createOrganization(ctx context.Context, st *store.Store, name string) (*store.Organization, string, error) {
	username, err := keys.RandomString(10, keys.LowerAlnum)
	if err != nil {
		return nil, "", err
	}
	secret, key, err := keyauth.New("bootstrap admin key", username, store.Permissions{"admin"})
	if err != nil {
		return nil, "", err
	}
	org, err := st.CreateOrganizationWithKey(ctx, name, key)
	if err != nil {
		return nil, "", err
	}
	return org, secret, nil
}

// writeSecretFile writes a file only its owner can read.
func writeSecretFile(path, content string) error {
	return os.WriteFile(path, []byte(content), 0o600)
}
